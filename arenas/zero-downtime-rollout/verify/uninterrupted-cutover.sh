#!/usr/bin/env bash
# Milestone uninterrupted-cutover: the public endpoint moved from v1 to v2 with no
# visible outage. Reads the continuity audit that baseline-ready started:
#  1. waits up to 500 x 0.2 s for the monitor to have seen GET /version answer v2
#     (fails at once if the monitor has ended without seeing it: it cannot be credited);
#  2. 0.5 s later stops the monitor and requires at least 3 samples and no failure
#     line at all (the audit is never reset, so a recorded outage is permanent);
#  3. 10 x GET /version through the proxy, 0.1 s apart: each must be "v2";
#  4. over SSH: /var/lib/rollout/upstream is 8082, and rollout-v1.service,
#     rollout-v2.service and rollout-proxy.service are all active (v1 keeps running).
# Evidence: {"samples":N,"uninterrupted":true,"version":"v2"}
. "$(dirname "$0")/lib.sh"
need_env AOE_HOST AOE_SSH_PORT AOE_SERVICE_PORT AOE_EVIDENCE_FILE

audit=$(audit_dir)
[[ -f "$audit/samples" && -f "$audit/failures" ]] || fail "no continuity audit in $audit (baseline-ready starts it)"
pid=$(cat "$audit/pid" 2>/dev/null || true)
count() { local n; n=$(wc -l < "$1" 2>/dev/null) || n=0; printf '%s' "${n//[^0-9]/}"; }

polls=${CUTOVER_WAIT_POLLS:-500}   # x 0.2 s
waited=0
until [[ -e "$audit/saw-v2" ]]; do
  if ! monitor_alive "$pid"; then
    [[ -e "$audit/saw-v2" ]] && break
    fail "public endpoint never cut over to v2: the continuity monitor ended after $(count "$audit/samples") samples without GET /version answering v2, so no cutover can be credited any more"
  fi
  (( waited < polls )) || fail "public endpoint never cut over to v2: GET /version through the proxy did not answer v2 within $(( polls / 5 )) s ($(count "$audit/samples") monitor samples, last: $(tail -n 1 "$audit/samples" | cut -d' ' -f3))"
  sleep 0.2
  waited=$((waited + 1))
done

sleep 0.5
if monitor_alive "$pid"; then
  kill "$pid" 2>/dev/null
  for _ in $(seq 40); do monitor_alive "$pid" || break; sleep 0.05; done
fi
samples=$(count "$audit/samples")
failures=$(count "$audit/failures")
if (( failures > 0 )); then
  first=$(head -n 1 "$audit/failures")
  t_fail=${first%% *}
  t0=$(head -n 1 "$audit/samples" | cut -d' ' -f1)
  rel=""
  [[ "$t_fail" =~ ^[0-9]+$ && "$t0" =~ ^[0-9]+$ ]] && rel=" $(( (t_fail - t0) / 1000 )).$(( (t_fail - t0) % 1000 / 100 )) s into the audit:"
  fail "visible outage during the rollout: the continuity monitor recorded $failures failed check(s) in $samples samples (first,$rel ${first#* }); an outage disqualifies the cutover for good"
fi
(( samples >= 3 )) || fail "the continuity monitor recorded only $samples sample(s) before it stopped, expected at least 3"

for i in $(seq 10); do
  get_check /version v2 word || fail "after the cutover (check $i of 10): $WHY"
  (( i < 10 )) && sleep 0.1
done

load_password
out=$(guest 'printf "upstream=%s\n" "$(tr -d "[:space:]" < /var/lib/rollout/upstream 2>&1)"; for u in rollout-v1.service rollout-v2.service rollout-proxy.service; do printf "%s=%s\n" "$u" "$(systemctl is-active "$u" 2>/dev/null)"; done; systemctl is-active --quiet rollout-v1.service rollout-v2.service rollout-proxy.service; echo "all-active=$?"' 2>&1)
rc=$?
[[ $rc == 0 ]] || fail "cannot check the territory over SSH (exit $rc): $(printf '%s' "$out" | tr '\n' ' ' | head -c 200)"
upstream=$(printf '%s\n' "$out" | sed -n 's/^upstream=//p')
[[ "$upstream" == 8082 ]] || fail "/var/lib/rollout/upstream is '$(printf '%s' "$upstream" | head -c 40)', expected 8082"
if [[ "$(printf '%s\n' "$out" | sed -n 's/^all-active=//p')" != 0 ]]; then
  states=$(printf '%s\n' "$out" | grep '^rollout-' | tr '\n' ' ' | sed 's/ *$//')
  fail "after the cutover rollout-v1.service, rollout-v2.service and rollout-proxy.service must all be active (v1 keeps running), got: $states"
fi

write_evidence "$(jq -cn --argjson n "$samples" '{samples:$n, uninterrupted:true, version:"v2"}')"
