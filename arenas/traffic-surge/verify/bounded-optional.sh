#!/usr/bin/env bash
# Milestone bounded-optional: 16 concurrent GET /optional/bounded-1..16, 2 s each. Every
# one must be answered in time: 200 with exactly "optional:bounded-<n>" (served) or a
# deliberate 429/503 (shed). A timeout, a refused connection or any other answer fails.
# Evidence: {"bounded":true,"requests":16,"served","shed"}
. "$(dirname "$0")/lib.sh"
need_env AOE_HOST AOE_SERVICE_PORT AOE_EVIDENCE_FILE

N=16
for n in $(seq 1 $N); do
  {
    curl -sS --noproxy '*' --max-time 2 -o "$WORK/body.$n" -w '%{http_code}' \
      "$(base_url)/optional/bounded-$n" > "$WORK/code.$n" 2> "$WORK/err.$n"
    echo $? > "$WORK/rc.$n"
  } &
  BG_PIDS+=("$!")
done
wait "${BG_PIDS[@]}" 2>/dev/null
BG_PIDS=()

served=0 shed=0 timed_out=0 refused=0 wrong=0 first=""
for n in $(seq 1 $N); do
  code=$(cat "$WORK/code.$n" 2>/dev/null); rc=$(cat "$WORK/rc.$n" 2>/dev/null)
  [[ "$code" =~ ^[0-9]{3}$ ]] || code=000
  if [[ "$code" == 200 ]] && body_reads "$WORK/body.$n" "optional:bounded-$n"; then
    served=$((served + 1)); continue
  fi
  if [[ "$code" == 429 || "$code" == 503 ]]; then
    shed=$((shed + 1)); continue
  fi
  if [[ "$code" == 000 && "$rc" == 28 ]]; then
    timed_out=$((timed_out + 1)); why="no answer within 2 s"
  elif [[ "$code" == 000 ]]; then
    refused=$((refused + 1)); why="no answer ($(head -c 120 "$WORK/err.$n" | tr '\n' ' ' | sed 's/ *$//'))"
  elif [[ "$code" == 200 ]]; then
    wrong=$((wrong + 1)); why="body '$(shown "$WORK/body.$n")', expected 'optional:bounded-$n'"
  else
    wrong=$((wrong + 1)); why="HTTP $code"
  fi
  first=${first:-"bounded-$n: $why"}
done

bad=$((timed_out + refused + wrong))
if (( bad > 0 )); then
  parts=()
  (( timed_out > 0 )) && parts+=("$timed_out timed out after 2 s")
  (( refused > 0 )) && parts+=("$refused got no answer")
  (( wrong > 0 )) && parts+=("$wrong gave a wrong answer")
  fail "of $N concurrent GET /optional/bounded-N, $(IFS=,; echo "${parts[*]}" | sed 's/,/, /g') (served $served, shed $shed$( (( refused + wrong > 0 )) && printf '; first: %s' "$first")); each must be 200 'optional:bounded-N' or shed with 429/503 within 2 s: optional load is not bounded"
fi

write_evidence "{\"bounded\":true,\"requests\":$((N)),\"served\":$((served)),\"shed\":$((shed))}"
