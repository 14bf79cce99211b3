#!/usr/bin/env bash
# Milestone priority-first-surge: 8 optional requests (/optional/first-1..8, 5 s each)
# are sent in the background; 0.1 s later a priority write (PUT /priority/surge-<16hex>)
# must be answered 204 within 1.5 s, and reading it back (1.5 s) must return the value.
# A service that serves requests one at a time queues the write behind ~3.6 s of
# optional work and fails. Retries repeat the load.
# Evidence: {"optional_pressure":8,"record","value"}
. "$(dirname "$0")/lib.sh"
need_env AOE_HOST AOE_SERVICE_PORT AOE_EVIDENCE_FILE

record="surge-$(random_hex 8)"
value="priority-$(random_hex 12)"

optional_load first 8 5
sleep 0.1

http PUT "/priority/$record" 1.5 /dev/null "$value"
if [[ "$HTTP_CODE" == 000 ]]; then
  if [[ "$HTTP_RC" == 28 ]]; then
    fail "PUT /priority/$record got no answer within 1.5 s while 8 optional requests were in flight (expected 204 at once: the priority write waited behind optional work)"
  fi
  fail "$(no_answer "PUT /priority/$record" 1.5) while 8 optional requests were in flight"
fi
[[ "$HTTP_CODE" == 204 ]] || fail "PUT /priority/$record returned HTTP $HTTP_CODE after ${HTTP_TIME} s while 8 optional requests were in flight, expected 204"
put_time=$HTTP_TIME

check_get "/priority/$record" "$value" 1.5 "the record just written" \
  || fail "after a 204 in ${put_time} s, $CHECK_REASON (8 optional requests in flight, 1.5 s limit)"

write_evidence "{\"optional_pressure\":8,\"record\":$(json_str "$record"),\"value\":$(json_str "$value")}"
