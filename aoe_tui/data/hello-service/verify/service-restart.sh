#!/usr/bin/env bash
# Milestone service-restart: restarts hello.service itself (the toolkit's guest: out of the
# player's reach), then the greeting of write-read must come back within 12 s. A restart
# that restarted nothing fails as tampering (the toolkit's unit_ids/restart_tampering:
# systemd's invocation id, the main process and the unit's processes, before and after).
# Evidence: {"id","name","restart":true,"boot_id"} (host-reboot compares the boot id)
. "$(dirname "$0")/lib.sh"
need_env AOE_HOST AOE_SSH_PORT AOE_SERVICE_PORT AOE_EVIDENCE_FILE AOE_PREVIOUS_EVIDENCE

previous_fields id=write-read.id name=write-read.name
[[ -n "$id" && -n "$name" ]] || fail "no write-read evidence (id, name) in $AOE_PREVIOUS_EVIDENCE"
load_password
unit=hello.service
out=$(guest "$(unit_ids before $unit)systemctl restart $unit 2>&1; rc=\$?; $(unit_ids after $unit)cat /proc/sys/kernel/random/boot_id; exit \$rc" 2>&1)
rc=$?
[[ $rc != 125 && $rc != 255 ]] || fail "$(head -n 1 <<< "$out")"
[[ $rc == 0 ]] || fail "systemctl restart $unit failed (exit $rc): $(without_ids "$out" | head -c 200)"
tampering=$(restart_tampering "$out" $unit)
[[ -z "$tampering" ]] || fail "$tampering"
boot_id=$(without_ids "$out" | tail -n 1)

greets "$id" "$name" 12 "after systemctl restart $unit"
write_evidence "{\"id\":$(json_str "$id"),\"name\":$(json_str "$name"),\"restart\":true,\"boot_id\":$(json_str "$boot_id")}"
