#!/bin/bash
# Runs at every boot (accepted-job-spool.service). Keeps the jobs that were accepted
# before the deployment: one JSON file per job, written only when it is absent, never
# rewritten. Content: {"id": ..., "payload": ..., "status": "accepted"}, no newline.
set -euo pipefail
spool=/var/lib/accepted-jobs
install -d -m 0755 "$spool"
keep() {
  local f="$spool/$1.json"
  [[ -e "$f" ]] && return 0
  printf '{"id": "%s", "payload": "%s", "status": "accepted"}' "$1" "$2" > "$spool/.$1.json.partial"
  mv -f "$spool/.$1.json.partial" "$f"
}
keep accepted-alpha-7d3 alpha
keep accepted-beta-91e beta
keep accepted-gamma-c42 gamma
