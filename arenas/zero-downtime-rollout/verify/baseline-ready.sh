#!/usr/bin/env bash
# Milestone baseline-ready: before any rollout the public endpoint (the proxy on 8080)
# serves the live v1: GET /health "ready", GET /version "v1", and both seeded customer
# records with their original values (2 s limit each). Then it starts the continuity
# monitor (continuity-monitor.sh, detached) on a fresh audit in
# <evidence dir>/continuity-audit/: samples and failures truncated, saw-v2 removed, its
# pid in pid. The monitor outlives this verifier by design; uninterrupted-cutover
# reads the audit and stops it (it also stops by itself, see the monitor).
# Evidence: {"baseline":"v1","records":["customer-alpha-73c","customer-beta-a19"]}
. "$(dirname "$0")/lib.sh"
need_env AOE_HOST AOE_SERVICE_PORT AOE_EVIDENCE_FILE

get_check /health ready word || fail "live v1 baseline: $WHY"
get_check /version v1 word || fail "live v1 baseline: $WHY"
for id in "${SEEDED_IDS[@]}"; do
  get_check "/records/$id" "${SEEDED[$id]}" exact || fail "live v1 baseline: $WHY"
done

audit=$(audit_dir)
mkdir -p "$audit" || fail "cannot create the continuity audit folder $audit"
old=$(cat "$audit/pid" 2>/dev/null || true)
if monitor_alive "$old"; then
  kill "$old" 2>/dev/null
  for _ in $(seq 20); do monitor_alive "$old" || break; sleep 0.05; done
fi
: > "$audit/failures" && : > "$audit/samples" || fail "cannot reset the continuity audit in $audit"
rm -f "$audit/saw-v2" "$audit/pid"
nohup "$(cd "$(dirname "$0")" && pwd)/continuity-monitor.sh" "$audit" "$(base_url)" </dev/null >/dev/null 2>&1 &
printf '%s\n' "$!" > "$audit/pid.tmp" && mv -f "$audit/pid.tmp" "$audit/pid" || fail "cannot write $audit/pid"

records=""
for id in "${SEEDED_IDS[@]}"; do records+="${records:+,}$(json_str "$id")"; done
write_evidence "{\"baseline\":\"v1\",\"records\":[$records]}"
