#!/usr/bin/env bash
# Milestone restart-under-load: a background loop of 30 sequential optional requests
# (/optional/restart-<n>, 1 s each) runs while the verifier restarts
# traffic-surge.service over SSH; it then waits up to 5 s (20 x 0.25 s) for /health
# (the wait itself never fails), writes PUT /priority/restart-<16hex> = durable-<24hex>
# (204 within 2 s) and reads it back (2 s). host-reboot reads the same record.
# Evidence: {"record","restart_under_load":true,"value"}
. "$(dirname "$0")/lib.sh"
need_env AOE_HOST AOE_SSH_PORT AOE_SERVICE_PORT AOE_EVIDENCE_FILE

record="restart-$(random_hex 8)"
value="durable-$(random_hex 12)"
load_password

(
  c=""
  trap '[[ -n "$c" ]] && kill "$c" 2>/dev/null; exit 0' TERM
  for n in $(seq 1 30); do
    curl -s --noproxy '*' --max-time 1 -o /dev/null "$(base_url)/optional/restart-$n" >/dev/null 2>&1 &
    c=$!
    wait "$c"
  done
) &
BG_PIDS+=("$!")

restart="$(unit_ids before traffic-surge.service)systemctl restart traffic-surge.service; rc=\$?; $(unit_ids after traffic-surge.service)exit \$rc"
out=$(timeout 12 bash -c "$(declare -p "${REFEREE_VARIABLES[@]}" restart; declare -f "${REFEREE_FUNCTIONS[@]}"); guest \"\$restart\"" 2>&1)
rc=$?
tampering=$(restart_tampering "$out" traffic-surge.service)
out=$(without_ids "$out")
[[ $rc != 125 ]] || fail "$(printf '%s' "$out" | head -n 1)"
[[ $rc == 124 ]] && fail "systemctl restart traffic-surge.service over SSH did not finish within 12 s"
[[ $rc == 0 ]] || fail "systemctl restart traffic-surge.service over SSH failed (exit $rc): $(printf '%s' "$out" | tr '\n' ' ' | head -c 200)"
[[ -z "$tampering" ]] || fail "$tampering"

for _ in $(seq 1 20); do
  check_health 1 && break
  sleep 0.25
done

put_204 "/priority/$record" "$value" 2 "after restarting traffic-surge.service under optional load, " " (expected 204)"
check_get "/priority/$record" "$value" 2 "the record just written" \
  || fail "after restarting traffic-surge.service under optional load and a 204, $CHECK_REASON"

write_evidence "{\"record\":$(json_str "$record"),\"restart_under_load\":true,\"value\":$(json_str "$value")}"
