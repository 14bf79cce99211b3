#!/usr/bin/env bash
# Milestone write-new: a new record written through the public endpoint (now v2).
# PUT /records/rollout-<16 hex> with an opaque value must answer exactly 204 within
# 2 s; GET must then return the value byte for byte (2 s). Each attempt uses a fresh id.
# Evidence: {"record","value"} (v2-restart and host-reboot read the same record).
. "$(dirname "$0")/lib.sh"
need_env AOE_HOST AOE_SERVICE_PORT AOE_EVIDENCE_FILE

record="rollout-$(random_hex 8)"
value="opaque-$(random_hex 12)"

http_put "/records/$record" "$value" >/dev/null; code=${CURL_OUT:-000}
[[ "$code" != 000 ]] || fail "PUT /records/$record: no answer within 2 s${HTTP_ERR:+ ($HTTP_ERR)}"
[[ "$code" == 204 ]] || fail "PUT /records/$record returned HTTP $code, expected 204"
get_check "/records/$record" "$value" exact || fail "right after a 204 PUT: $WHY"

write_evidence "{\"record\":$(json_str "$record"),\"value\":$(json_str "$value")}"
