#!/usr/bin/env bash
# Reference builder for traffic-surge (run as root inside the territory with `bash -s`), and
# its faulty variations (the runner puts AOE_FAULT=NAME first for scripted:NAME). It keeps
# the program's own request handling (the pristine app, imported beside it as base_app.py)
# and replaces what fails under a surge: the JSON ledger becomes sqlite (WAL,
# synchronous=FULL, each write committed before its 204, the history imported from
# priority.json), the server is threaded (listen backlog 128), and optional lookups get at
# most 4 concurrent slots (0.15 s each) and are shed with 503 beyond that, so priority
# writes never wait behind them. The oracle's ledger is /var/lib/traffic-surge/priority.sqlite3.
# fault hasty: fails priority-first-surge: moves the ledger to sqlite (ledger.sqlite3) but keeps the single-threaded HTTPServer and the 0.45 s optional lookup, so a priority write queues behind every optional request sent before it
# fault memory: fails bounded-optional: threaded with a durable ledger, but every optional lookup waits its turn for one worker (0.45 s each) with no limit on the wait and nothing shed, so most of a burst of 16 waits far beyond 2 s
# fault volatile: fails host-reboot: gets the surge right, but the ledger lives in /run/traffic-surge (a tmpfs), seeded from priority.json at each start: it survives a restart, and after a reboot only the history is back
set -uo pipefail
die() { echo "$*" >&2; exit 1; }
# the served program's settings: ledger, threaded server, optional slots, shed when full, cost (s)
db=/var/lib/traffic-surge/priority.sqlite3 threaded=True slots=4 shed=True cost=0.15
case "${AOE_FAULT:-}" in
  "") ;;
  hasty) db=/var/lib/traffic-surge/ledger.sqlite3 threaded=False slots=1 shed=False cost=0.45 ;;
  memory) db=/var/lib/traffic-surge/ledger.sqlite3 slots=1 shed=False cost=0.45 ;;
  volatile) db=/run/traffic-surge/ledger.sqlite3 ;;
  *) die "traffic-surge builder: unknown AOE_FAULT '$AOE_FAULT'" ;;
esac

echo "aoe-step: inspect traffic-surge.service and the running program"
systemctl cat traffic-surge.service >/dev/null 2>&1 || die "traffic-surge.service does not exist"
base=/usr/lib/aoe-arena/traffic-surge/app.py
[[ -f "$base" && -f /var/lib/traffic-surge/priority.json ]] || die "$base or /var/lib/traffic-surge/priority.json is missing"
install -d -m 0755 /opt/traffic-surge /var/lib/traffic-surge

echo "aoe-step: write the service: the program's handlers over a sqlite ledger, a gate on optional work"
install -m 0644 "$base" /opt/traffic-surge/base_app.py || die "cannot copy $base"
{
  printf '#!/usr/bin/env python3\n# Surge service: the base program handlers over a sqlite ledger, optional work gated.\n'
  printf 'DB, THREADED, SLOTS, SHED, COST = "%s", %s, %s, %s, %s\n' "$db" "$threaded" "$slots" "$shed" "$cost"
  cat <<'PY'

import json
import os
import sqlite3
import threading
from http.server import ThreadingHTTPServer

import base_app

LEDGER_JSON = base_app.LEDGER
OPTIONAL_SLOTS = threading.Semaphore(SLOTS)
_local = threading.local()


def db():
    conn = getattr(_local, "conn", None)
    if conn is None:
        conn = sqlite3.connect(DB, timeout=10, isolation_level=None)
        conn.execute("PRAGMA busy_timeout=10000")
        conn.execute("PRAGMA synchronous=FULL")
        _local.conn = conn
    return conn


class Ledger:
    """The ledger as the base program uses it (``key in``, ``[key]``, ``[key] = value``), in sqlite."""

    def __contains__(self, key):
        return db().execute("SELECT 1 FROM ledger WHERE id = ?", (key,)).fetchone() is not None

    def __getitem__(self, key):
        return db().execute("SELECT value FROM ledger WHERE id = ?", (key,)).fetchone()[0]

    def __setitem__(self, key, value):  # committed at once (autocommit), before the 204
        db().execute("INSERT OR REPLACE INTO ledger (id, value) VALUES (?, ?)", (key, value))


def init():
    os.makedirs(os.path.dirname(DB), exist_ok=True)
    conn = db()
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("CREATE TABLE IF NOT EXISTS ledger (id TEXT PRIMARY KEY, value TEXT NOT NULL)")
    try:
        with open(LEDGER_JSON, encoding="utf-8") as fh:
            history = json.load(fh)
    except (OSError, ValueError):
        history = {}
    conn.executemany("INSERT OR IGNORE INTO ledger (id, value) VALUES (?, ?)",
                     [(k, str(v)) for k, v in history.items()])
    base_app.read_ledger = Ledger
    base_app.write_ledger = lambda records: None  # each record was committed as it was set
    base_app.OPTIONAL_COST_SECONDS = COST


class Handler(base_app.Handler):
    def do_GET(self):
        if not self.path.startswith("/optional/"):
            return super().do_GET()
        if not OPTIONAL_SLOTS.acquire(blocking=not SHED):
            return self.reply(503, b"shed")
        try:
            super().do_GET()
        finally:
            OPTIONAL_SLOTS.release()


class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128


if __name__ == "__main__":
    init()
    (Server if THREADED else base_app.HTTPServer)(("0.0.0.0", 8080), Handler).serve_forever()
PY
} > /opt/traffic-surge/app.py.new || die "cannot write /opt/traffic-surge/app.py.new"
chmod 0755 /opt/traffic-surge/app.py.new && mv -f /opt/traffic-surge/app.py.new /opt/traffic-surge/app.py \
  || die "cannot install /opt/traffic-surge/app.py"
sync

echo "aoe-step: restart traffic-surge.service"
systemctl reset-failed traffic-surge.service >/dev/null 2>&1 || true
systemctl restart traffic-surge.service || die "systemctl restart traffic-surge.service failed"
u=http://127.0.0.1:8080
for _ in $(seq 1 150); do
  [[ "$(curl -s --max-time 1 $u/health 2>/dev/null)" == ready ]] && break
  sleep 0.1
done

echo "aoe-step: check health, the historical ledger, a priority write and an optional lookup"
[[ "$(curl -s --max-time 10 $u/health)" == ready ]] || die "GET /health is not 'ready' after the restart"
[[ "$(curl -s --max-time 10 $u/priority/history-amber-a91)" == ledger-alpha ]] || die "historical record history-amber-a91 is missing"
[[ "$(curl -s --max-time 10 -o /dev/null -w '%{http_code}' -X PUT --data-binary selfcheck-value $u/priority/selfcheck-1)" == 204 ]] \
  || die "PUT /priority/selfcheck-1 did not return 204"
[[ "$(curl -s --max-time 10 $u/priority/selfcheck-1)" == selfcheck-value ]] || die "GET /priority/selfcheck-1 did not return the value"
code=$(curl -s --max-time 10 -o /dev/null -w '%{http_code}' $u/optional/selfcheck)
[[ "$code" == 200 || "$code" == 503 ]] || die "GET /optional/selfcheck returned HTTP $code"
echo "aoe-summary: Served the program's handlers over a sqlite ledger ($db, threaded: $threaded) with optional work gated ($slots at once, shed: $shed)."
exit 0
