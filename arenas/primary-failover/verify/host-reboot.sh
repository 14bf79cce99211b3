#!/usr/bin/env bash
# Milestone host-reboot (operation host_reboot): runs after the referee rebooted the
# territory and SSH came back. Polls the public endpoint (40 rounds, 1 s apart, no new
# round after 29 s of the 40 s budget) until /health is "ready", /role is "primary", and
# the writes-restored record and the three original records read back. Then checks over
# SSH that the host really rebooted (boot id differs from the service-restart evidence),
# that primary.failed and primary.fenced exist, upstream is 8082, replica.role is
# primary and nothing listens on port 8081.
# Evidence: {"old_primary":"fenced","reboot":true,"record","role":"primary","value","boot_id"}
. "$(dirname "$0")/lib.sh"
need_env AOE_HOST AOE_SSH_PORT AOE_SERVICE_PORT AOE_EVIDENCE_FILE AOE_PREVIOUS_EVIDENCE

started=$(now_ms)
previous_fields record=service-restart.record value=service-restart.value old_boot=service-restart.boot_id \
  written=writes-restored.record written_value=writes-restored.value
record=${record:-$written} value=${value:-$written_value}
[[ -n "$record" && -n "$value" ]] || fail "no record/value in earlier evidence in $AOE_PREVIOUS_EVIDENCE"
load_password

all_reads() {
  get_is /health ready && get_is /role primary && get_is "/records/$record" "$value" exact || return 1
  local id
  for id in "${ORIGINAL_IDS[@]}"; do get_is "/records/$id" "${ORIGINAL_VALUE[$id]}" exact || return 1; done
}
if ! keep_trying 40 1 $(( started + ${REBOOT_DEADLINE_MS:-29000} )) all_reads; then
  probe_state && fail "after the reboot, $WRONG (territory state: upstream '$S_upstream', replica.role '$S_role')"
  fail "after the reboot, $WRONG"
fi

probe_state || fail "after the reboot: $PROBE_ERR"
[[ -z "$old_boot" || "$S_boot_id" != "$old_boot" ]] || fail "the host did not reboot (boot id unchanged: $S_boot_id)"
[[ "$S_failed" == yes ]] || fail "after the reboot, $STATE_DIR/primary.failed is missing"
[[ "$S_fenced" == yes ]] || fail "after the reboot, $STATE_DIR/primary.fenced is missing: the fence did not survive the reboot"
[[ "$S_upstream_ok" == yes ]] || fail "after the reboot, $STATE_DIR/upstream is '$S_upstream', expected $NEW_PORT"
[[ "$S_role_ok" == yes ]] || fail "after the reboot, $STATE_DIR/replica.role is '$S_role', expected primary"
check_old_port_closed "after the reboot, "

write_evidence "{\"old_primary\":\"fenced\",\"reboot\":true,\"record\":$(json_str "$record"),\"role\":\"primary\",\"value\":$(json_str "$value"),\"boot_id\":$(json_str "$S_boot_id")}"
