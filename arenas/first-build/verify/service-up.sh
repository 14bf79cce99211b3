#!/usr/bin/env bash
# Milestone service-up: GET /health answers 200 with the body "ready" (CONTRACT.md).
# Evidence: {"health":"ready"}
. "$(dirname "$0")/lib.sh"
need_env AOE_HOST AOE_SERVICE_PORT AOE_EVIDENCE_FILE

body=$(mktemp); trap 'rm -f "$body"' EXIT
http_get /health "$body" >/dev/null; code=${CURL_OUT:-000}
[[ "$code" != 000 ]] || fail "GET /health: no answer${HTTP_ERR:+ ($HTTP_ERR)}"
[[ "$code" == 200 ]] || fail "GET /health returned HTTP $code, expected 200"
got=$(head -c 200 "$body")
[[ "${got%$'\n'}" == ready ]] || fail "GET /health body was '$(printf '%s' "$got" | head -c 60 | tr -c '[:print:]' '?')', expected 'ready'"
write_evidence '{"health":"ready"}'
