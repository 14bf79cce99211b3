#!/usr/bin/env bash
# Milestone write-read: PUT a random name under a random id, then GET /hello/<id> must
# greet it at once. Each attempt uses a fresh id and name.
# Evidence: {"id","name"} (the later milestones ask for the same greeting)
. "$(dirname "$0")/lib.sh"
need_env AOE_HOST AOE_SERVICE_PORT AOE_EVIDENCE_FILE

id="guest-$(random_hex 6)"
name="visitor-$(random_hex 8)"
http_put "/names/$id" "$name" >/dev/null; code=${CURL_OUT:-000}
[[ "$code" == 2?? ]] || fail "PUT /names/$id gave $(answer "$code"), expected 200, 201 or 204"
greets "$id" "$name" 0 "right after the write"
write_evidence "{\"id\":$(json_str "$id"),\"name\":$(json_str "$name")}"
