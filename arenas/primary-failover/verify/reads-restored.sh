#!/usr/bin/env bash
# Milestone reads-restored: through the public endpoint (port 8080, 2 s per request),
# GET /health answers 200 "ready", GET /role answers 200 "primary" (the replica has
# been promoted) and the three records replicated before the failure read back with
# their original values. The first wrong answer fails the check.
# Evidence: {"reads":true,"records":[the three ids],"role":"primary"}
. "$(dirname "$0")/lib.sh"
need_env AOE_HOST AOE_SERVICE_PORT AOE_EVIDENCE_FILE

VIA=" through the public endpoint"
get_is /health ready || fail "$WRONG"
get_is /role primary || fail "$WRONG (the replica must be promoted)"
records=""
for id in "${ORIGINAL_IDS[@]}"; do
  get_is "/records/$id" "${ORIGINAL_VALUE[$id]}" || fail "$WRONG (a record replicated before the failure)"
  records+="${records:+,}$(json_str "$id")"
done
write_evidence "{\"reads\":true,\"records\":[$records],\"role\":\"primary\"}"
