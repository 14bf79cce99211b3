# hello-service's verifier helpers, sourced by verify/*.sh: first the runner's verifier
# toolkit (docs/arena-packages.md, "The verifier toolkit": fail, http_get, guest, ...),
# then what is this arena's own. Never redefine a name the toolkit defines.
. "${AOE_TUI_VERIFY_KIT:?the aoe-tui referee names its verifier toolkit here}"

BODY=$(mktemp)
trap 'rm -f "$BODY"' EXIT

# answer CODE: an HTTP answer (status CODE, body in $BODY) in a few words, for a failure line
answer() {
  if [[ "$1" == 000 ]]; then
    printf 'no answer%s' "${HTTP_ERR:+ ($HTTP_ERR)}"
  else
    printf "HTTP %s '%s'" "$1" "$(head -c 60 "$BODY" | tr -c '[:print:]' '?')"
  fi
}

# greets ID NAME SECONDS WHEN: poll GET /hello/ID every 0.2 s for up to SECONDS s until it
# answers 200 "hello, NAME" (returns 0). Fails (one line starting with WHEN) at the
# deadline, or at once when the service has answered 404 for 3 s: the name was lost.
greets() {
  local id=$1 name=$2 deadline=$(( $(now_s) + $3 )) when=$4 code first_404=""
  while :; do
    http_get "/hello/$id" "$BODY" >/dev/null; code=${CURL_OUT:-000}
    if [[ "$code" == 200 ]] && body_is "$BODY" "hello, $name"; then return 0; fi
    if [[ "$code" == 404 ]]; then
      first_404=${first_404:-$(now_ms)}
      (( $(now_ms) - first_404 < 3000 )) || fail "$when, GET /hello/$id answered HTTP 404 for 3 s: the name was lost"
    else
      first_404=""
    fi
    (( $(now_s) < deadline )) || fail "$when, GET /hello/$id gave $(answer "$code"), expected 200 'hello, $name'"
    sleep 0.2
  done
}
