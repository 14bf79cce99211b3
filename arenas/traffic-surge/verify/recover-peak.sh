#!/usr/bin/env bash
# Milestone recover-peak: 24 optional requests (/optional/peak-1..24, 4 s each) are sent
# in the background; 0.1 s later 4 sequential priority writes
# (PUT /priority/peak-<i>-<12hex> = accepted-<i>-<20hex>) must each be answered 204
# within 2 s, and then all four must read back unchanged (2 s each).
# Evidence: {"peak_optional_pressure":24,"records":[{"id","value"} x4],"recoverable":true}
. "$(dirname "$0")/lib.sh"
need_env AOE_HOST AOE_SERVICE_PORT AOE_EVIDENCE_FILE

ids=() values=()
for i in 1 2 3 4; do
  ids+=("peak-$i-$(random_hex 6)")
  values+=("accepted-$i-$(random_hex 10)")
done

optional_load peak 24 4
sleep 0.1

for k in 0 1 2 3; do
  put_204 "/priority/${ids[$k]}" "${values[$k]}" 2 "write $((k + 1)) of 4 at the optional peak: " \
    " (24 optional requests in flight; expected 204)"
done
for k in 0 1 2 3; do
  check_get "/priority/${ids[$k]}" "${values[$k]}" 2 "a record acknowledged with 204" \
    || fail "peak write $((k + 1)) of 4 not recoverable: $CHECK_REASON"
done

records=""
for k in 0 1 2 3; do records+="${records:+,}{\"id\":$(json_str "${ids[$k]}"),\"value\":$(json_str "${values[$k]}")}"; done
write_evidence "{\"peak_optional_pressure\":24,\"records\":[$records],\"recoverable\":true}"
