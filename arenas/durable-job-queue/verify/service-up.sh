#!/usr/bin/env bash
# Milestone service-up: GET /health (3 s) answers with the body "ready" (a trailing
# newline is tolerated; any answer below 400, as curl --fail).
# Evidence: {"health":"ready"}
. "$(dirname "$0")/lib.sh"
need_env AOE_HOST AOE_SERVICE_PORT AOE_EVIDENCE_FILE

body=$(mktemp); trap 'rm -f "$body"' EXIT
http_get /health "$body" 3; code=$HTTP_CODE
[[ "$code" != 000 ]] || fail "GET /health: no answer$(no_answer), expected 200 'ready'"
answered "$code" || fail "GET /health returned HTTP $code, expected 200 'ready'"
got=$(head -c 200 "$body"; printf x); got=${got%x}
while [[ "$got" == *$'\n' ]]; do got=${got%$'\n'}; done
[[ "$got" == ready ]] || fail "GET /health body was '$(printf '%s' "$got" | head -c 60 | tr -c '[:print:]' '?')', expected 'ready'"
write_evidence '{"health":"ready"}'
