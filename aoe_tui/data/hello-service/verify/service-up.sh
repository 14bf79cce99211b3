#!/usr/bin/env bash
# Milestone service-up: GET /health answers 200 with the body "ready".
# Evidence: {"health":"ready"}
. "$(dirname "$0")/lib.sh"
need_env AOE_HOST AOE_SERVICE_PORT AOE_EVIDENCE_FILE

http_get /health "$BODY" >/dev/null; code=${CURL_OUT:-000}
[[ "$code" == 200 ]] && body_is "$BODY" ready || fail "GET /health gave $(answer "$code"), expected 200 'ready'"
write_evidence '{"health":"ready"}'
