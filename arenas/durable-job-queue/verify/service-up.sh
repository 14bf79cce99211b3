#!/usr/bin/env bash
# Milestone service-up: GET /health (3 s) answers with the body "ready" (a trailing
# newline is tolerated; any answer below 400, as curl --fail).
# Evidence: {"health":"ready"}
. "$(dirname "$0")/lib.sh"
need_env AOE_HOST AOE_SERVICE_PORT AOE_EVIDENCE_FILE

health_check 3
[[ -z "$WHY" ]] || fail "$WHY, expected 200 'ready'"
write_evidence '{"health":"ready"}'
