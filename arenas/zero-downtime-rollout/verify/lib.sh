# Shared helpers for the zero-downtime-rollout verifiers (sourced, not executed).
# Environment (spec §4): AOE_TERRITORY_ID AOE_HOST AOE_SSH_PORT AOE_SERVICE_PORT
# AOE_CREDENTIAL_FILE AOE_PREVIOUS_EVIDENCE AOE_EVIDENCE_FILE.
# Rules: a failure prints ONE line to stderr and exits non-zero; the password is
# never echoed (it reaches sshpass through the environment, not argv).
set -uo pipefail

VERIFY_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

fail() { local msg="$*"; printf '%s\n' "${msg//$'\n'/ }" >&2; exit 1; }

need_env() {
  local v
  for v in "$@"; do
    [[ -n "${!v:-}" ]] || fail "verifier environment is missing $v"
  done
}

base_url() { printf 'http://%s:%s' "$AOE_HOST" "$AOE_SERVICE_PORT"; }

# the seeded customer records (starting state) and their original values
SEEDED_IDS=(customer-alpha-73c customer-beta-a19)
declare -A SEEDED=([customer-alpha-73c]=alpha-original [customer-beta-a19]=beta-original)

# continuity audit folder, shared by baseline-ready (starts the monitor) and
# uninterrupted-cutover (reads and stops it)
audit_dir() { printf '%s/continuity-audit' "$(dirname "$AOE_EVIDENCE_FILE")"; }

# random_hex N: N random bytes as lowercase hex (opaque ids)
random_hex() { od -An -N"$1" -tx1 /dev/urandom | tr -d ' \n'; }

# http_get PATH OUTFILE [MAX_S] -> prints the HTTP status code (000 if no answer);
# curl's error line (if any) goes to $HTTP_ERR.
HTTP_ERR=""
http_get() {
  local errf code
  errf=$(mktemp)
  code=$(curl -sS --max-time "${3:-2}" -o "$2" -w '%{http_code}' "$(base_url)$1" 2>"$errf") || true
  HTTP_ERR=$(head -c 300 "$errf" | tr '\n' ' ' | sed 's/ *$//')
  rm -f "$errf"
  printf '%s' "${code:-000}"
}

# http_put PATH VALUE [MAX_S] -> prints the HTTP status code
http_put() {
  local errf code
  errf=$(mktemp)
  code=$(printf '%s' "$2" | curl -sS --max-time "${3:-2}" -o /dev/null -w '%{http_code}' \
    -X PUT -H 'Content-Type: application/octet-stream' --data-binary @- "$(base_url)$1" 2>"$errf") || true
  HTTP_ERR=$(head -c 300 "$errf" | tr '\n' ' ' | sed 's/ *$//')
  rm -f "$errf"
  printf '%s' "${code:-000}"
}

# body_is FILE VALUE: exact byte comparison of a response body with VALUE
body_is() { printf '%s' "$2" | cmp -s - "$1"; }

# body_word FILE VALUE: the body is VALUE, a trailing newline tolerated (health, version)
body_word() { local got; got=$(head -c 200 "$1"); [[ "${got%$'\n'}" == "$2" ]]; }

# shown FILE: the first bytes of a body, printable, for a failure detail
shown() { head -c 60 "$1" | tr -c '[:print:]' '?'; }

# get_check PATH EXPECTED MODE(word|exact) [MAX_S]: one GET; on a mismatch sets
# $WHY (what was expected and seen) and returns 1.
WHY=""
get_check() {
  local body code ok=1
  body=$(mktemp)
  code=$(http_get "$1" "$body" "${4:-2}")
  if [[ "$code" == 200 ]]; then
    if [[ "$3" == word ]]; then body_word "$body" "$2" && ok=0; else body_is "$body" "$2" && ok=0; fi
    (( ok == 0 )) || WHY="GET $1 returned '$(shown "$body")', expected '$2'"
  elif [[ "$code" == 000 ]]; then
    WHY="GET $1: no answer${HTTP_ERR:+ ($HTTP_ERR)}"
  elif [[ "$code" == 404 && "$1" == /records/* ]]; then
    WHY="GET $1 returned HTTP 404 (the record is gone), expected 200 '$2'"
  else
    WHY="GET $1 returned HTTP $code, expected 200 '$2'"
  fi
  rm -f "$body"
  return "$ok"
}

# previous_field MILESTONE FIELD: a string field of an earlier milestone's evidence
# from the AOE_PREVIOUS_EVIDENCE file (map milestone -> MilestoneView), or empty.
previous_field() {
  [[ -f "${AOE_PREVIOUS_EVIDENCE:-}" ]] || return 0
  jq -r --arg m "$1" --arg f "$2" '(.[$m].evidence // {})[$f] // empty | tostring' "$AOE_PREVIOUS_EVIDENCE" 2>/dev/null || true
}

# load_password: read AOE_SSH_PASSWORD from the credential file without exporting
# anything else from it into this shell (the file may also set other AOE_* keys).
load_password() {
  need_env AOE_CREDENTIAL_FILE
  [[ -r "$AOE_CREDENTIAL_FILE" ]] || fail "credential file $AOE_CREDENTIAL_FILE is not readable"
  SSHPASS=$(set +u; . "$AOE_CREDENTIAL_FILE" >/dev/null 2>&1; printf '%s' "${AOE_SSH_PASSWORD:-}")
  [[ -n "$SSHPASS" ]] || fail "credential file $AOE_CREDENTIAL_FILE has no AOE_SSH_PASSWORD"
  export SSHPASS
}

# --- the referee's access to the territory (this block is the same in every arena's lib.sh;
# tests/test_referee_access.py checks it) ---------------------------------------------------
# The player is root in its territory: what it changes there (PATH, rc files, shell
# functions, /etc/environment, ~/.ssh/environment, binaries) must not change what the
# referee's commands do. A container territory (the provider's state.json beside
# AOE_CREDENTIAL_FILE says "container") is entered from the host side: the host's python3
# joins the namespaces of its init (REFEREE_ENTER), drops every capability (no more power
# than a process of the guest's own), then runs the image's env and bash with a fixed
# environment and no rc files. First the binaries on that path (REFEREE_BINARIES) are
# compared with the image's own copies (the state's "lowers"): one that differs is
# reported as tampering (exit 125).
# Other territories: password SSH running the same fixed-environment command (the login
# shell still starts first there: best effort). HTTP probes never go through here: they
# are made from the runner, outside the guest.
REFEREE_PATH=/usr/bin:/usr/sbin
REFEREE_SSH_PATH=/usr/bin:/usr/sbin:/bin:/sbin:/run/current-system/sw/bin
REFEREE_BINARIES=(/usr/bin/env /usr/bin/bash /usr/bin/systemctl /usr/bin/cat)
REFEREE_PYTHON=/usr/bin/python3
[[ -x "$REFEREE_PYTHON" ]] || REFEREE_PYTHON=python3
# python3 -I -S -c "$REFEREE_ENTER" LEADER PROGRAM ARGS... (isolated, no site import: less
# start-up CPU, and no PYTHON* variable of the runner's steers it): join the ipc, uts, net, pid and mount
# namespaces of host PID LEADER, then run PROGRAM (a guest path) in a child with an empty
# capability bounding set, no ambient capabilities and no_new_privs; exits with its status
REFEREE_ENTER='
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
for ns in ("ipc", "uts", "net", "pid", "mnt"):
    fd = os.open("/proc/%s/ns/%s" % (sys.argv[1], ns), os.O_RDONLY)
    if libc.setns(fd, 0) != 0:
        sys.exit("cannot enter the territory: setns %s: %s" % (ns, os.strerror(ctypes.get_errno())))
    os.close(fd)
pid = os.fork()
if pid == 0:
    try:
        os.chdir("/")
        for cap in range(64):
            libc.prctl(24, cap, 0, 0, 0)
        if libc.prctl(47, 4, 0, 0, 0) != 0 or libc.prctl(38, 1, 0, 0, 0) != 0 or libc.prctl(23, 0, 0, 0, 0) != 0:
            raise OSError("cannot drop capabilities")
        if libc.capset((ctypes.c_uint32 * 2)(0x20080522, 0), (ctypes.c_uint32 * 6)()) != 0:
            raise OSError("cannot clear the capability sets")
        os.execve(sys.argv[2], sys.argv[2:], {})
    except BaseException as err:
        sys.stderr.write("cannot run %s in the territory: %s\n" % (sys.argv[2], err))
        os._exit(127)
code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
sys.exit(code if code >= 0 else 128 - code)
'

# territory_state: read the container provider's state.json of this territory with one jq
# run (jq 1.6 costs ~45 ms of CPU a start) into T_ROOT, T_NSPAWN, T_LEADER and the array
# T_LOWERS; status 1 (nothing set) when the territory is not a container. Inside one guest
# call the state is read once (T_READ: 1 = container, 0 = not; the helpers guest runs in
# subshells inherit it); elsewhere it is read anew (a reboot changes the init's PID)
territory_state() {
  local state
  local -a f=()
  case "${T_READ:-}" in 1) return 0 ;; 0) return 1 ;; esac
  state="$(dirname -- "${AOE_CREDENTIAL_FILE:-/nonexistent/x}")/state.json"
  [[ -r "$state" ]] || return 1
  mapfile -t f < <(jq -r 'select(.provider == "container") | (.root // ""), (.nspawn_pid // "" | tostring),
    (.leader_pid // "" | tostring), (.lowers // [])[]' "$state" 2>/dev/null)
  (( ${#f[@]} >= 3 )) || return 1
  T_ROOT=${f[0]} T_NSPAWN=${f[1]} T_LEADER=${f[2]}
  T_LOWERS=("${f[@]:3}")
}

# territory_leader: host PID of the container territory's init; "none" when the container
# is not running; nothing when the territory is not a container
territory_leader() {
  local pid want
  territory_state || return 0
  want=$(stat -c '%d:%i' -- "$T_ROOT/" 2>/dev/null) || want=""
  for pid in $T_LEADER $(cat "/proc/${T_NSPAWN:-0}/task/${T_NSPAWN:-0}/children" 2>/dev/null); do
    # the init's root directory is the territory's root (same file system and inode)
    [[ -n "$want" && "$(stat -c '%d:%i' -- "/proc/$pid/root/" 2>/dev/null)" == "$want" ]] || continue
    grep -qE '^NSpid:.*[[:space:]]1$' "/proc/$pid/status" 2>/dev/null || continue
    printf '%s' "$pid"
    return 0
  done
  printf 'none'
}

# referee_tampering: the REFEREE_BINARIES of a container territory that are not the image's
# (a different file, missing, or a symlink leaving the territory's root), space-separated
referee_tampering() {
  local root f low img real
  territory_state || return 0
  root=$(realpath -e -- "$T_ROOT" 2>/dev/null) || return 0
  for f in "${REFEREE_BINARIES[@]}"; do
    img=""
    for low in "${T_LOWERS[@]}"; do
      if [[ -e "$low$f" || -L "$low$f" ]]; then img="$low$f"; break; fi
    done
    [[ -n "$img" ]] || continue
    real=$(realpath -e -- "$root$f" 2>/dev/null)
    if [[ "$real" != "$root"/* ]] || ! cmp -s -- "$img" "$real"; then printf '%s ' "$f"; fi
  done
}

# guest CMD...: run CMD (one shell string) as root in the territory, out of the player's
# reach (see above); exit 125 with "tampering: ..." on stderr when a binary the referee
# runs was replaced, 255 when the territory cannot be reached
guest() {
  local cmd="$*" leader bad T_READ="" T_ROOT T_NSPAWN T_LEADER
  local -a T_LOWERS=()
  if territory_state; then T_READ=1; else T_READ=0; fi
  leader=$(territory_leader)
  if [[ -n "$leader" ]]; then
    if [[ "$leader" == none ]]; then
      printf '%s\n' "the territory's container is not running (no init to enter from the host)" >&2
      return 255
    fi
    bad=$(referee_tampering)
    if [[ -n "$bad" ]]; then
      printf "tampering: the territory's %s is not the image's (the referee runs it)\n" "${bad% }" >&2
      return 125
    fi
    "$REFEREE_PYTHON" -I -S -c "$REFEREE_ENTER" "$leader" \
      /usr/bin/env -i PATH="$REFEREE_PATH" HOME=/root LC_ALL=C /usr/bin/bash --noprofile --norc -c "$cmd"
    return
  fi
  sshpass -e ssh -p "$AOE_SSH_PORT" \
    -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR \
    -o PreferredAuthentications=password -o PubkeyAuthentication=no -o NumberOfPasswordPrompts=1 \
    -o ConnectTimeout="${SSH_CONNECT_TIMEOUT:-5}" -o ServerAliveInterval=2 -o ServerAliveCountMax=2 \
    "root@$AOE_HOST" "exec /usr/bin/env -i PATH=$REFEREE_SSH_PATH HOME=/root LC_ALL=C bash --noprofile --norc -c $(printf '%q' "$cmd")"
}

# service_listener PORT: "PID:START" (host PID and start time) of the process listening on
# TCP PORT in a container territory, seen from the host side (the host's ss in the
# territory's network namespace); nothing when not a container or nothing listens
service_listener() {
  local leader pid
  leader=$(territory_leader)
  [[ -n "$leader" && "$leader" != none ]] || return 0
  pid=$(nsenter --target "$leader" --net -- ss -Hltnp "sport = :$1" 2>/dev/null | grep -o 'pid=[0-9]*' | head -n 1 | cut -d= -f2)
  [[ -n "$pid" ]] || return 0
  printf '%s:%s' "$pid" "$(sed -E 's/^.*\) //' "/proc/$pid/stat" 2>/dev/null | cut -d' ' -f20)"
}
# unit_ids TAG UNIT...: guest shell text printing "TAG UNIT MainPID=N", "TAG UNIT
# InvocationID=ID" and "TAG UNIT procs=PID PID ..." (the processes in the unit's cgroup) for
# each unit; put it before and after a restart in one guest command
unit_ids() {
  local tag=$1 u
  shift
  for u in "$@"; do
    printf 'systemctl show -p MainPID -p InvocationID %s 2>/dev/null | sed "s/^/%s %s /"; ' "$u" "$tag" "$u"
    printf 'cg=$(systemctl show -p ControlGroup --value %s 2>/dev/null); ' "$u"
    printf 'echo "%s %s procs=$([ -n "$cg" ] && for f in /sys/fs/cgroup$cg /sys/fs/cgroup/unified$cg /sys/fs/cgroup/systemd$cg; do cat "$f/cgroup.procs"; done 2>/dev/null | sort -un | tr "\\n" " ")"; ' "$tag" "$u"
  done
}

# restart_tampering OUT UNIT...: one line "tampering: ..." when OUT (a guest command's output
# with unit_ids before/after around a restart) shows a unit the restart did not restart
# (InvocationID, or a non-zero MainPID, unchanged); nothing otherwise
restart_tampering() {
  local out=$1 u b a p
  shift
  for u in "$@"; do
    b=$(printf '%s\n' "$out" | sed -n "s/^before $u InvocationID=//p" | head -n 1)
    a=$(printf '%s\n' "$out" | sed -n "s/^after $u InvocationID=//p" | head -n 1)
    if [[ -n "$b" && "$a" == "$b" ]]; then
      printf 'tampering: systemctl restart %s did not restart it (systemd InvocationID %s unchanged)' "$u" "$b"
      return 0
    fi
    b=$(printf '%s\n' "$out" | sed -n "s/^before $u MainPID=//p" | head -n 1)
    a=$(printf '%s\n' "$out" | sed -n "s/^after $u MainPID=//p" | head -n 1)
    if [[ -n "$b" && "$b" != 0 && "$a" == "$b" ]]; then
      printf "tampering: %s's main process (pid %s) did not change across the restart" "$u" "$b"
      return 0
    fi
    b=$(printf '%s\n' "$out" | sed -n "s/^before $u procs=//p" | head -n 1)
    a=" $(printf '%s\n' "$out" | sed -n "s/^after $u procs=//p" | head -n 1) "
    for p in $b; do
      if [[ "$a" == *" $p "* ]]; then
        printf 'tampering: process %s of %s survived its restart' "$p" "$u"
        return 0
      fi
    done
  done
}

# without_ids OUT: OUT without the unit_ids lines
without_ids() { printf '%s\n' "$1" | grep -v -E '^(before|after) [^ ]+ (MainPID=|InvocationID=|procs=)'; }
# --- end of the referee's access block ----------------------------------------------------

# write_evidence JSON: store the evidence (must be valid JSON) at AOE_EVIDENCE_FILE
write_evidence() {
  local tmp="$AOE_EVIDENCE_FILE.tmp.$$"
  printf '%s\n' "$1" > "$tmp" && mv -f "$tmp" "$AOE_EVIDENCE_FILE" || fail "cannot write evidence file $AOE_EVIDENCE_FILE"
}

# monitor_alive PID: PID is a running continuity monitor (not a reused pid)
monitor_alive() {
  [[ "$1" =~ ^[0-9]+$ ]] || return 1
  { tr '\0' ' ' < "/proc/$1/cmdline"; } 2>/dev/null | grep -q 'continuity-monitor\.sh'
}

# now_s: wall-clock seconds (integer) for poll deadlines; now_ms: milliseconds
now_s() { date +%s; }
now_ms() { local t=${EPOCHREALTIME/[.,]/}; printf '%s' $((t / 1000)); }
