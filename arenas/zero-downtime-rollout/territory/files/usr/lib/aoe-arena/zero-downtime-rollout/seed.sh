#!/bin/bash
# Runs at every boot, before the v1 service, the v2 slot and the proxy start.
# Lays down the live v1 state and writes only what is missing (never overwrites):
#   /var/lib/rollout/                 records store and proxy upstream
#   /var/lib/rollout/upstream         "8081\n" (the port the proxy forwards to)
#   /var/lib/rollout/records.sqlite3  records(id, value) with the customer rows
#   /opt/rollout/                     folder of the v2 program (empty at first)
set -eu
umask 022
[ -d /var/lib/rollout ] || install -d -m 0755 /var/lib/rollout
[ -d /opt/rollout ] || install -d -m 0755 /opt/rollout
if [ ! -e /var/lib/rollout/upstream ]; then
  printf '8081\n' > /var/lib/rollout/upstream
fi
exec /usr/bin/python3 - <<'PY'
import sqlite3

connection = sqlite3.connect("/var/lib/rollout/records.sqlite3", timeout=10)
connection.execute("CREATE TABLE IF NOT EXISTS records (id TEXT PRIMARY KEY, value TEXT NOT NULL)")
connection.executemany(
    "INSERT OR IGNORE INTO records(id, value) VALUES (?, ?)",
    [("customer-alpha-73c", "alpha-original"), ("customer-beta-a19", "beta-original")],
)
connection.commit()
connection.close()
PY
