#!/usr/bin/env bash
# Built-in builder `scripted:hasty` of durable-job-queue: run as root inside the territory
# (`bash -s` over SSH). It builds a correct, durable queue (the same API, worker, slots
# and sqlite database under /var/lib/job-queue as the oracle) but goes straight to the
# job API it was asked for and never looks for work that was accepted before it arrived:
# the host's earlier accepted jobs are never queued, so GET /jobs/<their id> answers 404.
# Everything it does itself (new jobs, worker restarts, reboots) is right.
# Prints `aoe-step:` lines; exits 0 after its own check, else 1 with one stderr line.
set -uo pipefail
say() { printf 'aoe-step: %s\n' "$*"; }
die() { printf '%s\n' "$*" >&2; exit 1; }

APP=/opt/job-queue
DATA=/var/lib/job-queue
STARTS=/etc/replaybook
PY=/run/current-system/sw/bin/python3

say "inspect the job slots"
# SSH may answer before the boot is over: let the boot units finish first
timeout 60 systemctl is-system-running --wait >/dev/null 2>&1
systemctl cat job-api.service job-worker.service >/dev/null 2>&1 || die "the job-api/job-worker slots are missing"
[[ -x $PY ]] || die "$PY is missing"

say "write the queue programs to $APP (sqlite in $DATA)"
install -d -m 0755 "$APP" "$DATA" "$STARTS" || die "cannot create $APP, $DATA or $STARTS"
cat > "$APP/common.py" <<'PY' || die "cannot write $APP/common.py"
"""Shared by api.py and worker.py: the durable queue database."""
import os
import sqlite3

DATA = "/var/lib/job-queue"
DB = DATA + "/jobs.sqlite3"
WAKE = "/run/job-queue.wake"  # the API's "a job is waiting" datagrams to the worker


def connect():
    os.makedirs(DATA, exist_ok=True)
    db = sqlite3.connect(DB, timeout=30, isolation_level=None)
    db.execute("PRAGMA busy_timeout = 30000")
    return db


def init():
    db = connect()
    db.execute(
        "CREATE TABLE IF NOT EXISTS jobs (id TEXT PRIMARY KEY, payload TEXT NOT NULL, "
        "status TEXT NOT NULL, result TEXT, attempts INTEGER NOT NULL DEFAULT 0)"
    )
    db.close()


init()
PY
cat > "$APP/api.py" <<'PY' || die "cannot write $APP/api.py"
import json
import socket
import sqlite3
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote

import common


def wake_worker():
    """Tell the worker that a job is waiting (it also looks by itself twice a second)."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
            s.setblocking(False)
            s.sendto(b"job", common.WAKE)
    except OSError:
        pass


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def answer(self, code, body=b"", ctype="text/plain"):
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def job_id(self):
        path = self.path.split("?", 1)[0]
        if not path.startswith("/jobs/") or len(path) <= 6:
            return None
        return unquote(path[6:])

    def do_GET(self):
        if self.path.split("?", 1)[0] == "/health":
            return self.answer(200, b"ready")
        jid = self.job_id()
        if jid is None:
            return self.answer(404, b"not found")
        db = common.connect()
        try:
            row = db.execute("SELECT id, payload, status, result, attempts FROM jobs WHERE id = ?", (jid,)).fetchone()
        finally:
            db.close()
        if row is None:
            return self.answer(404, b"unknown job")
        doc = dict(zip(("id", "payload", "status", "result", "attempts"), row))
        self.answer(200, json.dumps(doc).encode(), "application/json")

    def do_POST(self):
        jid = self.job_id()
        length = int(self.headers.get("Content-Length") or 0)
        payload = self.rfile.read(length).decode("utf-8", errors="replace")
        if jid is None:
            return self.answer(404, b"not found")
        db = common.connect()
        try:
            db.execute("INSERT INTO jobs (id, payload, status, result, attempts) VALUES (?, ?, 'queued', NULL, 0)", (jid, payload))
        except sqlite3.IntegrityError:
            return self.answer(409, b"job exists")
        finally:
            db.close()
        wake_worker()
        self.answer(202, b"accepted")


class Server(ThreadingHTTPServer):
    allow_reuse_address = True
    daemon_threads = True


Server(("0.0.0.0", 8080), Handler).serve_forever()
PY
cat > "$APP/worker.py" <<'PY' || die "cannot write $APP/worker.py"
import os
import socket

import common


def wake_socket():
    """The socket the API pokes when it accepts a job; waiting on it is the idle loop."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    try:
        os.unlink(common.WAKE)
    except FileNotFoundError:
        pass
    s.bind(common.WAKE)
    s.settimeout(0.5)
    return s


wake = wake_socket()
db = common.connect()
while True:
    # claim and complete in one transaction: all of it is durable, or none of it
    db.execute("BEGIN IMMEDIATE")
    row = db.execute("SELECT id, payload FROM jobs WHERE status = 'queued' ORDER BY rowid LIMIT 1").fetchone()
    if row is not None:
        db.execute(
            "UPDATE jobs SET status = 'completed', result = ?, attempts = attempts + 1 WHERE id = ?",
            ("processed:" + row[1], row[0]),
        )
    db.execute("COMMIT")
    if row is None:
        try:
            wake.recv(64)
        except socket.timeout:
            pass
PY

say "point the job-api and job-worker slots at the programs ($STARTS start files)"
printf 'exec %s %s/api.py\n' "$PY" "$APP" > "$STARTS/job-api-start" || die "cannot write $STARTS/job-api-start"
printf 'exec %s %s/worker.py\n' "$PY" "$APP" > "$STARTS/job-worker-start" || die "cannot write $STARTS/job-worker-start"
sync

say "start job-api.service and job-worker.service"
systemctl reset-failed job-api.service job-worker.service >/dev/null 2>&1
systemctl restart job-api.service job-worker.service || die "systemctl restart job-api.service job-worker.service failed"

say "self-check: /health and a new job completed once"
ids=""
probe="selfcheck-$(od -An -N6 -tx1 /dev/urandom | tr -d ' \n')"
posted=""
for _ in $(seq 1 150); do
  if [[ "$(curl -s --max-time 1 http://127.0.0.1:8080/health)" == ready ]]; then
    if [[ -z "$posted" ]]; then
      code=$(curl -s --max-time 2 -o /dev/null -w '%{http_code}' -X POST --data-binary probe "http://127.0.0.1:8080/jobs/$probe")
      [[ "$code" == 202 ]] || die "self-check: POST /jobs/$probe returned HTTP $code, expected 202"
      posted=yes
    fi
    ok=yes
    for id in $ids $probe; do
      curl -s --max-time 1 "http://127.0.0.1:8080/jobs/$id" | jq -e '.status == "completed" and .attempts == 1 and .result == "processed:" + .payload' >/dev/null 2>&1 || { ok=""; break; }
    done
    [[ -n "$ok" ]] && { echo "aoe-summary: deployed the job queue (API + worker in their slots, sqlite under /var/lib/job-queue) and checked a new job"; exit 0; }
  fi
  sleep 0.1
done
die "self-check: the queue did not complete a new job within 15 s"
