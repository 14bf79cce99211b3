#!/usr/bin/env bash
# Milestone writes-restored: through the public endpoint, PUT /records/post-failover-<16 hex>
# with an opaque value must answer exactly 204 (2 s), and GET must then return the
# value byte for byte.
# Evidence: {"record","value","writes":true} (later milestones read the same record).
. "$(dirname "$0")/lib.sh"
need_env AOE_HOST AOE_SERVICE_PORT AOE_EVIDENCE_FILE

record="post-failover-$(random_hex 8)"
value="opaque-$(random_hex 12)"
ask "/records/$record" "$value"
case "$CODE" in
  204) ;;
  202) fail "PUT /records/$record through the public endpoint: $(what_answered), expected HTTP 204 (202 only accepts the write for later; the write must be stored when it is acknowledged)" ;;
  503) fail "PUT /records/$record through the public endpoint: $(what_answered), expected HTTP 204 (the promoted replica still refuses writes)" ;;
  *)   fail "PUT /records/$record through the public endpoint: $(what_answered), expected HTTP 204" ;;
esac
VIA=" right after its PUT"
get_is "/records/$record" "$value" exact || fail "$WRONG"

write_evidence "{\"record\":$(json_str "$record"),\"value\":$(json_str "$value"),\"writes\":true}"
