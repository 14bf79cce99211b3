#!/usr/bin/env bash
# Milestone write-read: store an opaque random value under an opaque random record id
# with PUT /records/<id>, then read it back byte for byte with GET /records/<id>.
# Evidence: {"record": "...", "value": "..."} (later milestones read the same record).
. "$(dirname "$0")/lib.sh"
need_env AOE_HOST AOE_SERVICE_PORT AOE_EVIDENCE_FILE

record="record-$(random_hex 8)"
value="opaque-$(random_hex 16)"

http_put "/records/$record" "$value" >/dev/null; code=${CURL_OUT:-000}
[[ "$code" != 000 ]] || fail "PUT /records/$record: no answer${HTTP_ERR:+ ($HTTP_ERR)}"
[[ "$code" == 2?? ]] || fail "PUT /records/$record returned HTTP $code, expected 200, 201 or 204"

body=$(mktemp); trap 'rm -f "$body"' EXIT
http_get "/records/$record" "$body" >/dev/null; code=${CURL_OUT:-000}
[[ "$code" != 000 ]] || fail "GET /records/$record: no answer${HTTP_ERR:+ ($HTTP_ERR)}"
[[ "$code" == 200 ]] || fail "GET /records/$record returned HTTP $code right after the write, expected 200"
body_is "$body" "$value" || fail "GET /records/$record returned a different value than was written"

write_evidence "{\"record\":$(json_str "$record"),\"value\":$(json_str "$value")}"
