#!/usr/bin/env bash
# Milestone service-restart: restarts hello.service itself (the toolkit's restart_unit: out
# of the player's reach, through guest), then the greeting of write-read must come back
# within 12 s. A restart that restarted nothing fails as tampering (systemd's invocation id,
# the main process and the unit's processes, before and after).
# Evidence: {"id","name","restart":true,"boot_id"} (host-reboot compares the boot id)
. "$(dirname "$0")/lib.sh"
need_env AOE_HOST AOE_SSH_PORT AOE_SERVICE_PORT AOE_EVIDENCE_FILE AOE_PREVIOUS_EVIDENCE

previous_fields id=write-read.id name=write-read.name
[[ -n "$id" && -n "$name" ]] || fail "no write-read evidence (id, name) in $AOE_PREVIOUS_EVIDENCE"
load_password
unit=hello.service
restart_unit $unit 'cat /proc/sys/kernel/random/boot_id'
boot_id=$(tail -n 1 <<< "$RESTART_OUT")

greets "$id" "$name" 12 "after systemctl restart $unit"
write_evidence "{\"id\":$(json_str "$id"),\"name\":$(json_str "$name"),\"restart\":true,\"boot_id\":$(json_str "$boot_id")}"
