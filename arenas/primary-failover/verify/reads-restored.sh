#!/usr/bin/env bash
# Milestone reads-restored: through the public endpoint (port 8080, 2 s per request),
# GET /health answers 200 "ready", GET /role answers 200 "primary" (the replica has
# been promoted) and the three records replicated before the failure read back with
# their original values. The first wrong answer fails the check.
# Evidence: {"reads":true,"records":[the three ids],"role":"primary"}
. "$(dirname "$0")/lib.sh"
need_env AOE_HOST AOE_SERVICE_PORT AOE_EVIDENCE_FILE

body=$(mktemp); trap 'rm -f "$body"' EXIT

# expect PATH TEXT WHAT: GET PATH must answer 200 with TEXT (trailing newlines ignored)
expect() {
  local code
  code=$(http_get "$1" "$body")
  [[ "$code" == 200 ]] || fail "GET $1 through the public endpoint: $(what_answered "$code" "$body"), expected 200 '$2'$3"
  body_text_is "$body" "$2" || fail "GET $1 through the public endpoint returned '$(shown "$body")', expected '$2'$3"
}

expect /health ready ""
expect /role primary " (the replica must be promoted)"
for id in "${ORIGINAL_IDS[@]}"; do
  expect "/records/$id" "${ORIGINAL_VALUE[$id]}" " (a record replicated before the failure)"
done

records=""
for id in "${ORIGINAL_IDS[@]}"; do records+="${records:+,}$(json_str "$id")"; done
write_evidence "{\"reads\":true,\"records\":[$records],\"role\":\"primary\"}"
