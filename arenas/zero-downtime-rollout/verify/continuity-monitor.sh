#!/usr/bin/env bash
# Continuity monitor of the public endpoint during the rollout (not a milestone).
#   continuity-monitor.sh AUDIT_DIR BASE_URL
# baseline-ready.sh starts it detached (nohup, stdio on /dev/null) once the live v1
# baseline is confirmed; uninterrupted-cutover.sh stops it. Up to 2400 rounds; each
# round makes four sequential GETs through the public endpoint, 1 s limit each:
# /health (must be "ready"), /version ("v1" or "v2"), and the two seeded customer
# records (their original values, byte for byte). Then it sleeps 0.05 s.
# Files in AUDIT_DIR:
#   samples   one line per round: "<unix ms> health=<code> version=<code>:<body> <record>=<code> ..."
#   failures  one line per failed check: "<unix ms> <what was expected and what was seen>"
#   saw-v2    touched when GET /version answered v2
# It ends by itself after its rounds, after CONTINUITY_MAX_SECONDS (default 900, the
# arena's duration), or as soon as AUDIT_DIR is gone.
set -uo pipefail
audit=${1:?usage: continuity-monitor.sh AUDIT_DIR BASE_URL}
base=${2:?usage: continuity-monitor.sh AUDIT_DIR BASE_URL}
rounds=${CONTINUITY_ROUNDS:-2400}
max_s=${CONTINUITY_MAX_SECONDS:-900}

tmp=$(mktemp -d)
child=""
stop() { [[ -n "$child" ]] && kill "$child" 2>/dev/null; rm -rf "$tmp"; exit 0; }
trap stop TERM INT HUP
trap 'rm -rf "$tmp"' EXIT

ids=(customer-alpha-73c customer-beta-a19)
values=(alpha-original beta-original)
paths=(/health /version "/records/${ids[0]}" "/records/${ids[1]}")
ms() { local t=${EPOCHREALTIME/[.,]/}; printf '%s' $((t / 1000)); }

start=$SECONDS
for ((round = 1; round <= rounds; round++)); do
  [[ -d "$audit" ]] || break
  (( SECONDS - start < max_s )) || break
  rm -f "$tmp"/body.*
  args=()
  for i in 0 1 2 3; do args+=(-o "$tmp/body.$i" "$base${paths[$i]}"); done
  curl -sS --max-time 1 -w '%{http_code}\n' "${args[@]}" >"$tmp/codes" 2>"$tmp/err" &
  child=$!
  wait "$child"
  child=""
  at=$(ms)
  mapfile -t code < "$tmp/codes"
  err=$(head -n 1 "$tmp/err" | head -c 200)
  body=()
  for i in 0 1 2 3; do
    if [[ -f "$tmp/body.$i" ]]; then body[$i]=$(head -c 200 "$tmp/body.$i" | tr -c '[:print:]' '?'); else body[$i]=""; fi
  done
  problems=()
  for i in 0 1 2 3; do
    c=${code[$i]:-000}
    case $i in
      0) want=ready ;;
      1) want="v1 or v2" ;;
      *) want=${values[$((i - 2))]} ;;
    esac
    if [[ "$c" == 000 ]]; then
      problems+=("GET ${paths[$i]}: no answer${err:+ ($err)}")
      continue
    fi
    if [[ "$c" != 200 ]]; then
      problems+=("GET ${paths[$i]} returned HTTP $c, expected 200 '$want'")
      continue
    fi
    case $i in
      0) [[ "${body[0]%\?}" == ready ]] || problems+=("GET /health returned '${body[0]}', expected 'ready'") ;;
      1) [[ "${body[1]%\?}" == v1 || "${body[1]%\?}" == v2 ]] || problems+=("GET /version returned '${body[1]}', expected 'v1' or 'v2'") ;;
      *) printf '%s' "$want" | cmp -s - "$tmp/body.$i" || problems+=("GET ${paths[$i]} returned '${body[$i]}', expected '$want'") ;;
    esac
  done
  printf '%s health=%s version=%s:%s %s=%s %s=%s\n' "$at" "${code[0]:-000}" "${code[1]:-000}" "${body[1]}" \
    "${ids[0]}" "${code[2]:-000}" "${ids[1]}" "${code[3]:-000}" >> "$audit/samples" 2>/dev/null || break
  for p in "${problems[@]}"; do printf '%s %s\n' "$at" "$p" >> "$audit/failures" 2>/dev/null; done
  if [[ "${code[1]:-000}" == 200 && "${body[1]%\?}" == v2 ]]; then touch "$audit/saw-v2" 2>/dev/null; fi
  sleep 0.05
done
exit 0
