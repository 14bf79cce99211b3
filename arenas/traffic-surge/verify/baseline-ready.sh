#!/usr/bin/env bash
# Milestone baseline-ready: GET /health answers 200 "ready" and the three historical
# priority records the territory started with read back unchanged (2 s per request).
# Passes on the untouched starting state. The four requests share a 4.5 s budget (the
# milestone's timeout is 5 s), so a slow service fails with a reason, not a timeout.
# Evidence: {"health":"ready","historical_records":3}
. "$(dirname "$0")/lib.sh"
need_env AOE_HOST AOE_SERVICE_PORT AOE_EVIDENCE_FILE

deadline=$(( $(now_ms) + 4500 ))
check_health "$(cap_time "$deadline" 2000)" || fail "$CHECK_REASON"
for i in "${!HISTORY_IDS[@]}"; do
  check_get "/priority/${HISTORY_IDS[$i]}" "${HISTORY_VALUES[$i]}" "$(cap_time "$deadline" 2000)" "historical record" \
    || fail "$CHECK_REASON"
done
write_evidence '{"health":"ready","historical_records":3}'
