#!/usr/bin/env bash
# Milestone writes-restored: through the public endpoint, PUT /records/post-failover-<16 hex>
# with an opaque value must answer exactly 204 (2 s), and GET must then return the
# value byte for byte.
# Evidence: {"record","value","writes":true} (later milestones read the same record).
. "$(dirname "$0")/lib.sh"
need_env AOE_HOST AOE_SERVICE_PORT AOE_EVIDENCE_FILE

record="post-failover-$(random_hex 8)"
value="opaque-$(random_hex 12)"
body=$(mktemp); trap 'rm -f "$body"' EXIT

code=$(http_put "/records/$record" "$value" "$body")
if [[ "$code" != 204 ]]; then
  case "$code" in
    202) why=" (202 only accepts the write for later; the write must be stored when it is acknowledged)" ;;
    503) why=" (the promoted replica still refuses writes)" ;;
    *)   why="" ;;
  esac
  fail "PUT /records/$record through the public endpoint: $(what_answered "$code" "$body"), expected HTTP 204$why"
fi
code=$(http_get "/records/$record" "$body")
[[ "$code" == 200 ]] || fail "GET /records/$record right after its PUT: $(what_answered "$code" "$body"), expected 200 with the written value"
body_is "$body" "$value" || fail "GET /records/$record right after its PUT returned '$(shown "$body")', expected '$value'"

write_evidence "{\"record\":$(json_str "$record"),\"value\":$(json_str "$value"),\"writes\":true}"
