#!/bin/bash
# Every boot: lay out the failed-primary topology and the replicated records.
# Routing and role files are written only when absent, so a change made on this
# host survives reboots; the incident marker is touched at every boot.
set -eu
state=/var/lib/failover
install -d -m 0755 "$state"
[ -e "$state/upstream" ] || printf '8081\n' > "$state/upstream"
[ -e "$state/replica.role" ] || printf 'replica\n' > "$state/replica.role"
touch "$state/primary.failed"
/usr/bin/python3 - "$state/records.sqlite3" <<'PY'
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
db.execute("CREATE TABLE IF NOT EXISTS records (id TEXT PRIMARY KEY, value TEXT NOT NULL)")
db.executemany(
    "INSERT OR IGNORE INTO records (id, value) VALUES (?, ?)",
    [
        ("customer-red-4a7", "red-original"),
        ("customer-blue-8d2", "blue-original"),
        ("customer-green-f31", "green-original"),
    ],
)
db.commit()
db.close()
PY
