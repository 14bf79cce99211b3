#!/usr/bin/env bash
# Milestone service-restart: the verifier restarts failover-replica.service and
# failover-proxy.service over SSH, then polls the public endpoint (20 rounds, 0.5 s
# apart, no new round after 14 s of the 20 s budget) until GET /role is "primary" and
# the writes-restored record reads back unchanged.
# Evidence: {"record","restart":true,"value","boot_id"} (boot_id lets host-reboot prove
# that a reboot really happened).
. "$(dirname "$0")/lib.sh"
need_env AOE_HOST AOE_SSH_PORT AOE_SERVICE_PORT AOE_EVIDENCE_FILE AOE_PREVIOUS_EVIDENCE

started=$(now_ms)
previous_fields record=writes-restored.record value=writes-restored.value
[[ -n "$record" && -n "$value" ]] || fail "no writes-restored evidence (record/value) in $AOE_PREVIOUS_EVIDENCE"

load_password
units=(failover-replica.service failover-proxy.service)
out=$(guest "$(unit_ids before "${units[@]}")systemctl restart ${units[*]} 2>&1; rc=\$?; $(unit_ids after "${units[@]}")cat /proc/sys/kernel/random/boot_id; exit \$rc" 2>&1)
rc=$?
tampering=$(restart_tampering "$out" "${units[@]}")
out=$(without_ids "$out")
[[ $rc != 125 ]] || fail "$(printf '%s' "$out" | head -n 1)"
boot_id=$(printf '%s\n' "$out" | tail -n 1 | tr -d '[:space:]')
[[ $rc == 0 ]] || fail "systemctl restart ${units[*]} failed (exit $rc): $(printf '%s' "$out" | tr '\n' ' ' | head -c 200)"
[[ -z "$tampering" ]] || fail "$tampering"

role_and_record() { get_is /role primary && get_is "/records/$record" "$value" exact; }
keep_trying 20 0.5 $(( started + ${RESTART_DEADLINE_MS:-14000} )) role_and_record ||
  fail "after restarting ${units[0]} and ${units[1]}, $WRONG"
write_evidence "{\"record\":$(json_str "$record"),\"restart\":true,\"value\":$(json_str "$value")${boot_id:+,\"boot_id\":$(json_str "$boot_id")}}"
