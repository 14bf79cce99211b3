#!/usr/bin/env bash
# Milestone host-reboot (operation host_reboot): runs after the referee rebooted the
# territory and SSH came back. The boot id must differ from the one service-restart saw,
# then the greeting of write-read must come back; both within ~25 s.
# Evidence: {"reboot":true,"id","name","boot_id"}
. "$(dirname "$0")/lib.sh"
need_env AOE_HOST AOE_SSH_PORT AOE_SERVICE_PORT AOE_EVIDENCE_FILE AOE_PREVIOUS_EVIDENCE

previous_fields id=write-read.id name=write-read.name old_boot=service-restart.boot_id
[[ -n "$id" && -n "$name" ]] || fail "no write-read evidence (id, name) in $AOE_PREVIOUS_EVIDENCE"
load_password
deadline=$(( $(now_s) + 25 ))
until boot_id=$(guest 'cat /proc/sys/kernel/random/boot_id' 2>/dev/null) && [[ -n "$boot_id" ]]; do
  (( $(now_s) < deadline )) || fail "cannot reach the territory after the reboot"
  sleep 0.2
done
[[ "$boot_id" != "$old_boot" ]] || fail "the host did not reboot (boot id unchanged: $boot_id)"

greets "$id" "$name" $(( deadline - $(now_s) )) "after the reboot"
write_evidence "{\"reboot\":true,\"id\":$(json_str "$id"),\"name\":$(json_str "$name"),\"boot_id\":$(json_str "$boot_id")}"
