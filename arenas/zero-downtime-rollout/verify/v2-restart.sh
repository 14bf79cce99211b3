#!/usr/bin/env bash
# Milestone v2-restart: the verifier restarts rollout-v2.service over SSH itself (after a
# reset-failed, so an earlier start limit does not refuse the restart), then
# polls the public endpoint (20 x 0.5 s) until GET /health is "ready", GET /version is
# "v2" and the write-new record reads back unchanged. Once v2 is back (ready, v2), a 404
# for the record fails at once: the acknowledged write is gone ("record lost").
# Evidence: {"record","v2_restart":true,"value"}
. "$(dirname "$0")/lib.sh"
need_env AOE_HOST AOE_SSH_PORT AOE_SERVICE_PORT AOE_EVIDENCE_FILE AOE_PREVIOUS_EVIDENCE

previous_fields record=write-new.record value=write-new.value
[[ -n "$record" && -n "$value" ]] || fail "no write-new evidence (record/value) in $AOE_PREVIOUS_EVIDENCE"

load_password
restart_unit --reset-failed rollout-v2.service

last="no attempt"
for attempt in $(seq 20); do
  if get_check /health ready word && get_check /version v2 word; then
    if get_check "/records/$record" "$value" exact; then
      write_evidence "{\"record\":$(json_str "$record"),\"v2_restart\":true,\"value\":$(json_str "$value")}"
      exit 0
    fi
    # a v2 that is up again (ready, version v2) and denies an acknowledged record has lost it
    [[ "$WHY" == *"HTTP 404"* ]] && fail "record lost across the v2 restart: after systemctl restart rollout-v2.service, v2 is back (health ready, version v2) but $WHY"
  fi
  last=$WHY
  sleep 0.5
done
fail "after systemctl restart rollout-v2.service, 20 checks over 10 s never passed; last: $last"
