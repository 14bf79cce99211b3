#!/usr/bin/env bash
# Built-in oracle builder of durable-job-queue: run as root inside the territory
# (`bash -s` over SSH). Deploys an exactly-once job queue the fast, durable way:
#   - one sqlite database under /var/lib/job-queue (jobs: id, payload, status, result,
#     attempts), shared by the API and the worker;
#   - every program start adds the jobs of the accepted-job spool as queued
#     (insert-or-ignore: known jobs, completed or not, are never touched);
#   - the API (ThreadingHTTPServer on 0.0.0.0:8080) answers GET /health, POST /jobs/<id>
#     (202, or 409 for a known id) and GET /jobs/<id>;
#   - the worker claims the oldest queued job and completes it in ONE transaction
#     (BEGIN IMMEDIATE ... COMMIT), so a stop at any moment neither loses nor repeats work;
#     idle, it waits for the API's "job accepted" datagram (or 0.5 s), so a new job is
#     done within milliseconds;
#   - both run in the pre-declared slots through their start files (full python3 path:
#     a unit's PATH is short).
# Prints `aoe-step:` lines; exits 0 after its own check, else 1 with one stderr line.
# Its faults (`scripted:NAME` runs this script after a first line AOE_FAULT=NAME; empty or
# unset = the oracle), each the oracle with one realistic flaw:
# fault hasty: fails recover-accepted: it goes straight to the job API it was asked for and never looks for work accepted before it arrived, so the spool is never read and GET /jobs/<accepted id> answers 404 (all it does itself is right)
# fault memory: fails worker-restart: its worker keeps the jobs it completed in this run as "not acknowledged" in memory, nothing acknowledges them, and when stopped (SIGTERM, which systemctl restart waits for) it hands them all back to the queue, so the finished job is queued again or redone (attempts 2)
# fault volatile: fails host-reboot: it keeps the database under /run/job-queue "because /run is fast", a tmpfs that survives worker restarts but not a reboot (the spool's jobs come back, the process-new job is gone: 404)
set -uo pipefail
say() { printf 'aoe-step: %s\n' "$*"; }
die() { printf '%s\n' "$*" >&2; exit 1; }

AOE_FAULT=${AOE_FAULT:-}
APP=/opt/job-queue
DATA=/var/lib/job-queue
SPOOL=/var/lib/accepted-jobs
STARTS=/etc/replaybook
PY=/run/current-system/sw/bin/python3
KIND="durable exactly-once job queue"
case "$AOE_FAULT" in
  "") ;;
  memory) KIND="job queue" ;;
  hasty) SPOOL="" KIND="job queue" ;;  # never looks for work accepted before it arrived
  volatile) DATA=/run/job-queue KIND="job queue" ;;  # "because /run is fast" (a tmpfs)
  *) die "unknown fault AOE_FAULT=$AOE_FAULT (hasty, memory, volatile)" ;;
esac

say "inspect the job slots${SPOOL:+ and the accepted-job spool}"
# SSH may answer before the boot is over: let the boot units (the spool seed) finish first
timeout 60 systemctl is-system-running --wait >/dev/null 2>&1
systemctl cat job-api.service job-worker.service >/dev/null 2>&1 || die "the job-api/job-worker slots are missing"
[[ -x $PY ]] || die "$PY is missing"
[[ -z "$SPOOL" ]] || compgen -G "$SPOOL/*.json" >/dev/null || die "no accepted jobs in $SPOOL"

say "write the queue programs to $APP (sqlite in $DATA)"
install -d -m 0755 "$APP" "$DATA" "$STARTS" || die "cannot create $APP, $DATA or $STARTS"
{ printf '"""Shared by api.py and worker.py: the queue database."""\nDATA = "%s"\nSPOOL = "%s"\n' "$DATA" "$SPOOL"
  cat <<'PY'
import glob
import json
import os
import sqlite3

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
    # jobs accepted before this deployment: queue each one that is not known yet
    for path in sorted(glob.glob(SPOOL + "/*.json")) if SPOOL else []:
        try:
            with open(path, encoding="utf-8") as f:
                job = json.load(f)
            jid, payload = str(job["id"]), str(job["payload"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
        db.execute(
            "INSERT OR IGNORE INTO jobs (id, payload, status, result, attempts) VALUES (?, ?, 'queued', NULL, 0)",
            (jid, payload),
        )
    db.close()


init()
PY
} > "$APP/common.py" || die "cannot write $APP/common.py"
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

    def log_message(self, *args):
        pass


class Server(ThreadingHTTPServer):
    allow_reuse_address = True
    daemon_threads = True


Server(("0.0.0.0", 8080), Handler).serve_forever()
PY
{ cat <<'PY'
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


def work(done):
    """Forever: claim and complete the oldest queued job in one transaction (all of it is
    durable, or none of it), then done(its id); idle, wait for the API's wake-up."""
    while True:
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
        else:
            done(row[0])


wake = wake_socket()
db = common.connect()
PY
  if [[ "$AOE_FAULT" != memory ]]; then
    echo 'work(lambda jid: None)'
  else cat <<'PY'
import signal
import sys

# Jobs this worker completed whose results nobody has acknowledged yet. Kept in memory
# only: nothing ever acknowledges them, and on a stop they go back to the queue, because
# the worker cannot confirm that anyone took their results.
unacknowledged = []


class Stop(Exception):
    pass


def on_stop(signum, frame):
    raise Stop()


signal.signal(signal.SIGTERM, on_stop)
signal.signal(signal.SIGINT, on_stop)
try:
    work(unacknowledged.append)
except Stop:
    pass

# stopping: give every unacknowledged job back to the queue before exiting
signal.signal(signal.SIGTERM, signal.SIG_IGN)
if db.in_transaction:
    db.execute("ROLLBACK")
db.execute("BEGIN IMMEDIATE")
for jid in unacknowledged:
    db.execute("UPDATE jobs SET status = 'queued', result = NULL WHERE id = ?", (jid,))
db.execute("COMMIT")
db.close()
sys.exit(0)
PY
  fi
} > "$APP/worker.py" || die "cannot write $APP/worker.py"

say "point the job-api and job-worker slots at the programs ($STARTS start files)"
printf 'exec %s %s/api.py\n' "$PY" "$APP" > "$STARTS/job-api-start" || die "cannot write $STARTS/job-api-start"
printf 'exec %s %s/worker.py\n' "$PY" "$APP" > "$STARTS/job-worker-start" || die "cannot write $STARTS/job-worker-start"
sync

say "start job-api.service and job-worker.service"
systemctl reset-failed job-api.service job-worker.service >/dev/null 2>&1
systemctl restart job-api.service job-worker.service || die "systemctl restart job-api.service job-worker.service failed"

say "self-check: /health,${SPOOL:+ the accepted jobs and} a new job completed once"
ids=$([[ -z "$SPOOL" ]] || jq -r '.id' "$SPOOL"/*.json 2>/dev/null)
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
    [[ -n "$ok" ]] && { echo "aoe-summary: deployed the $KIND (API + worker in their slots, sqlite under $DATA${SPOOL:+, accepted jobs queued once})"; exit 0; }
  fi
  sleep 0.1
done
die "self-check: the queue did not complete${SPOOL:+ the accepted jobs and} a new job within 15 s"
