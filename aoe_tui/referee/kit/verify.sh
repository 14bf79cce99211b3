# aoe-tui's verifier toolkit (version 1): what every arena's verifiers share, provided by the
# runner. A verifier sources it (directly or from its package's verify/lib.sh):
#
#     . "${AOE_TUI_VERIFY_KIT:?the aoe-tui referee names its verifier toolkit here}"
#
# AOE_TUI_VERIFY_KIT is our own variable (not upstream's §4 set): the runner puts this file's
# absolute path there for every verifier it runs. Upstream's verifiers do not use it.
# The interface (docs/arena-packages.md, "The verifier toolkit", lists it with examples):
#   fail MSG                 one line on stderr, exit 1 (the failure detail the referee records)
#   need_env VAR...          fail unless each VAR is set and not empty
#   base_url                 http://$AOE_HOST:$AOE_SERVICE_PORT
#   random_hex N             N random bytes as lowercase hex
#   curl_call ARGS...        curl -sS ARGS; sets CURL_OUT (write-out), CURL_RC, HTTP_ERR
#   http_get PATH OUT        GET from the service, body to OUT; prints the status (000 = none)
#   http_put PATH VALUE      PUT VALUE; prints the status
#                            (HTTP_TIMEOUT seconds each, default 3; also sets CURL_OUT and
#                            HTTP_ERR, which `code=$(http_get ...)` loses in its subshell:
#                            call `http_get PATH OUT >/dev/null; code=${CURL_OUT:-000}` to
#                            keep curl's error for a failure line)
#   body_is FILE VALUE       FILE's bytes are VALUE
#   previous_field M F       field F of milestone M's earlier evidence (or empty)
#   previous_fields V=M.F... several at once into variables
#   load_password            AOE_SSH_PASSWORD from the credential file into SSHPASS
#   guest CMD                run CMD as root in the territory, out of the player's reach
#                            (exit 125 "tampering: ..." when a binary the referee runs was
#                            replaced, 255 when the territory cannot be reached)
#   territory_leader, territory_state, referee_tampering, service_listener PORT
#   restart_unit [--reset-failed] UNIT [AFTER]
#                            restart UNIT in the territory and prove it restarted (fails
#                            as tampering when it did not); RESTART_OUT: the output
#   unit_ids TAG UNIT..., restart_tampering OUT UNIT..., without_ids OUT
#                            the same parts for a restart of your own (several units, ids
#                            in the evidence)
#   json_str VALUE           VALUE as a JSON string
#   json_field FILE KEY      a JSON answer's top-level field as text (empty when absent)
#   write_evidence JSON      the evidence, written atomically to AOE_EVIDENCE_FILE
#   now_s, now_ms            wall-clock seconds / milliseconds
# Environment (spec §4): AOE_TERRITORY_ID AOE_HOST AOE_SSH_PORT AOE_SERVICE_PORT
# AOE_CREDENTIAL_FILE AOE_PREVIOUS_EVIDENCE AOE_EVIDENCE_FILE.
# Rules: a failure prints ONE line to stderr and exits non-zero; the password is never echoed
# (it reaches sshpass through the environment, not argv).
VERIFY_KIT_VERSION=1
set -uo pipefail

fail() { local msg="$*"; printf '%s\n' "${msg//$'\n'/ }" >&2; exit 1; }

need_env() {
  local v
  for v in "$@"; do
    [[ -n "${!v:-}" ]] || fail "verifier environment is missing $v"
  done
}

base_url() { printf 'http://%s:%s' "$AOE_HOST" "$AOE_SERVICE_PORT"; }

# random_hex N: N random bytes as lowercase hex (opaque ids, spec §4 pattern)
random_hex() { od -An -N"$1" -tx1 /dev/urandom | tr -d ' \n'; }

# curl_call ARGS...: `curl -sS ARGS` (ARGS send the body to a file with -o) with its write-out
# "%{http_code}" (or ARGS' own -w text, given as CURL_WRITE); sets CURL_OUT (the write-out: ""
# when curl did not run), CURL_RC (curl's exit status) and HTTP_ERR (curl's error text: the
# first 300 bytes, newlines as spaces, trailing spaces dropped). One fork and no temporary
# file: curl's stderr and the write-out share one pipe, the write-out behind a marker line.
CURL_WRITE='%{http_code}' CURL_OUT="" CURL_RC=0
curl_call() {
  local out
  out=$(curl -sS "$@" -w "\n@aoe-curl-write-out@$CURL_WRITE@aoe-curl-end@" 2>&1)
  CURL_RC=$?
  if [[ "$out" =~ $'\n'@aoe-curl-write-out@(.*)@aoe-curl-end@ ]]; then
    CURL_OUT=${BASH_REMATCH[1]}
    out=${out/"${BASH_REMATCH[0]}"/}
  else
    CURL_OUT=""
  fi
  local LC_ALL=C
  out=${out:0:300}
  out=${out//$'\n'/ }
  HTTP_ERR=${out%"${out##*[! ]}"}
}

# http_get PATH OUTFILE -> prints the HTTP status code (000 if no answer); curl's
# error line (if any) goes to $HTTP_ERR.
HTTP_ERR=""
http_get() {
  local CURL_WRITE='%{http_code}'
  curl_call --max-time "${HTTP_TIMEOUT:-3}" -o "$2" "http://$AOE_HOST:$AOE_SERVICE_PORT$1"
  printf '%s' "${CURL_OUT:-000}"
}

# http_put PATH VALUE -> prints the HTTP status code
http_put() {
  local CURL_WRITE='%{http_code}'
  curl_call --max-time "${HTTP_TIMEOUT:-3}" -o /dev/null -X PUT -H 'Content-Type: application/octet-stream' --data-binary @- "http://$AOE_HOST:$AOE_SERVICE_PORT$1" < <(printf '%s' "$2")
  printf '%s' "${CURL_OUT:-000}"
}

# body_is FILE VALUE: exact byte comparison of a response body with VALUE
body_is() { printf '%s' "$2" | cmp -s - "$1"; }

# previous_field MILESTONE FIELD: a string field of an earlier milestone's evidence
# from the AOE_PREVIOUS_EVIDENCE file (map milestone -> MilestoneView), or empty
# (previous_fields with one field; MILESTONE has no ".").
previous_field() {
  local value
  previous_fields value="$1.$2"
  printf '%s\n' "$value"
}

# previous_fields VAR=MILESTONE.FIELD...: set each VAR to what `jq -r '(.[MILESTONE].evidence
# // {})[FIELD] // empty | tostring'` prints for AOE_PREVIOUS_EVIDENCE (the same string,
# trailing newlines dropped, empty when absent). Our runner writes "previous.fields" beside
# previous.json (NUL-terminated MILESTONE, FIELD, "s"+VALUE or "j" for a value only jq renders
# exactly; aoe_tui/referee/verifier.py), read here with bash builtins (no eval); when it is
# missing, older than previous.json, malformed or holds a "j" asked for (another runner:
# upstream's writes only previous.json), one jq run serves them all (jq 1.6 costs ~45 ms of
# CPU a start; NUL characters are dropped there as bash drops them from a jq -r output). MILESTONE has no "."; VAR is a variable name other than this function's own
# locals (a, key, out, comp, i, spec, vals, rec, got).
previous_fields() {
  local a key out comp i
  local -a spec=() vals=() rec=()
  local -A got=()
  for a in "$@"; do
    printf -v "${a%%=*}" '%s' ""
    spec+=("${a#*=}")
  done
  [[ -f "${AOE_PREVIOUS_EVIDENCE:-}" ]] || return 0
  comp=${AOE_PREVIOUS_EVIDENCE%/*}/previous.fields
  if [[ "$AOE_PREVIOUS_EVIDENCE" == */* && -r "$comp" && ! "$comp" -ot "$AOE_PREVIOUS_EVIDENCE" ]] \
      && mapfile -d '' -t rec < "$comp" && (( ${#rec[@]} % 3 == 0 )); then
    for (( i = 0; i < ${#rec[@]}; i += 3 )); do
      got["${rec[i]}.${rec[i + 1]}"]=${rec[i + 2]}
    done
    for key in "${spec[@]}"; do
      [[ "$key" == *.* ]] || key+=.
      out=${got["$key"]-s}
      if [[ "$out" != s* ]]; then vals=(); break; fi
      vals+=("${out#s}")
    done
  fi
  if (( ${#vals[@]} != $# )); then
    out=$(jq -r '. as $e | $ARGS.positional[] | (split(".") | {m: .[0], f: (.[1:] | join("."))}) as $k
      | [try (($e[$k.m].evidence // {})[$k.f] // empty | tostring) catch empty] | (.[0] // "")
      | explode | map(select(. != 0)) | implode | @sh' \
      "$AOE_PREVIOUS_EVIDENCE" --args "${spec[@]}" 2>/dev/null) || return 0
    eval "vals=($out)"
    (( ${#vals[@]} == $# )) || return 0
  fi
  i=0
  for a in "$@"; do
    out=${vals[i]}
    out=${out%"${out##*[!$'\n']}"}
    printf -v "${a%%=*}" '%s' "$out"
    i=$((i + 1))
  done
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

# --- the referee's access to the territory (tests/test_referee_access.py holds it to the
# container provider's own entry program) --------------------------------------------------
# The player is root in its territory: what it changes there (PATH, rc files, shell
# functions, /etc/environment, ~/.ssh/environment, binaries) must not change what the
# referee's commands do. A container territory (the provider's state.json beside
# AOE_CREDENTIAL_FILE says "container") is entered from the host side: a host interpreter
# joins the namespaces of its init (REFEREE_ENTER_PERL with the host's perl on x86_64 and
# aarch64, ~4 ms of CPU; REFEREE_ENTER with python3 elsewhere, ~26 ms), drops every
# capability (no more power than a process of the guest's own), then runs the image's env
# and bash with a fixed environment and no rc files. First the binaries on that path
# (REFEREE_BINARIES) are compared with the image's own copies (the state's "lowers"): one
# that differs is reported as tampering (exit 125).
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
# perl -T -e "$REFEREE_ENTER_PERL" SYSCALLS LEADER PROGRAM ARGS...: the same as REFEREE_ENTER
# (same steps, messages and exit statuses) with perl-base (Essential on Debian): SYSCALLS is
# "setns,prctl,capset", the syscall numbers of the host's architecture (REFEREE_SYSCALLS, by
# bash's HOSTTYPE: no uname run; empty = use python3). -T: no PERL5OPT/PERL5LIB of the
# runner's steers it (the arguments are untainted on purpose: they are the referee's own)
REFEREE_PERL=/usr/bin/perl
case "${HOSTTYPE:-}" in
  x86_64) REFEREE_SYSCALLS=308,157,126 ;;
  aarch64) REFEREE_SYSCALLS=268,167,91 ;;
  *) REFEREE_SYSCALLS="" ;;
esac
[[ -x "$REFEREE_PERL" ]] || REFEREE_SYSCALLS=""
REFEREE_ENTER_PERL='
my ($nr, @a) = map { /\A(.*)\z/s; $1 } @ARGV;
my ($setns, $prctl, $capset) = split /,/, $nr;
my $leader = shift @a;
for my $ns (qw(ipc uts net pid mnt)) {
    my $fh;
    unless (open($fh, "<", "/proc/$leader/ns/$ns") and syscall($setns, fileno($fh), 0) == 0) {
        print STDERR "cannot enter the territory: setns $ns: $!\n";
        exit 1;
    }
    close $fh;
}
my $pid = fork;
if (!defined $pid) { print STDERR "cannot enter the territory: fork: $!\n"; exit 1 }
if ($pid == 0) {
    my $err;
    if (!chdir "/") { $err = "chdir /: $!" }
    else {
        syscall($prctl, 24, $_, 0, 0, 0) for 0 .. 63;
        if (syscall($prctl, 47, 4, 0, 0, 0) != 0 or syscall($prctl, 38, 1, 0, 0, 0) != 0
            or syscall($prctl, 23, 0, 0, 0, 0) != 0) { $err = "cannot drop capabilities" }
        elsif (syscall($capset, my $hdr = pack("Li", 0x20080522, 0), my $data = pack("L6", (0) x 6)) != 0) {
            $err = "cannot clear the capability sets" }
        else { %ENV = (); exec { $a[0] } @a; $err = "$!" }
    }
    print STDERR "cannot run $a[0] in the territory: $err\n";
    exit 127;
}
waitpid($pid, 0);
exit(($? & 127) ? 128 + ($? & 127) : $? >> 8);
'

# territory_state: read the container provider's state of this territory into T_ROOT,
# T_NSPAWN, T_LEADER and the array T_LOWERS; status 1 (nothing set) when the territory is not
# a container. The provider's "referee-state" beside state.json (NUL-terminated fields,
# written right after each state.json) is read with a bash builtin; when it is missing,
# older than state.json or malformed (another runner: upstream's provider writes only
# state.json), state.json is read with one jq run (jq 1.6 costs ~45 ms of CPU a start).
# Inside one guest call the state is read once (T_READ: 1 = container, 0 = not; the helpers
# guest runs in subshells inherit it); elsewhere it is read anew (a reboot changes the
# init's PID)
territory_state() {
  local dir state comp
  local -a f=()
  case "${T_READ:-}" in 1) return 0 ;; 0) return 1 ;; esac
  dir=${AOE_CREDENTIAL_FILE:-/nonexistent/x}
  if [[ "$dir" == */* ]]; then dir=${dir%/*}; dir=${dir:-/}; else dir=.; fi
  state=$dir/state.json comp=$dir/referee-state
  [[ -r "$state" ]] || return 1
  if [[ -r "$comp" && ! "$comp" -ot "$state" ]] && mapfile -d '' -t f < "$comp" \
      && (( ${#f[@]} >= 4 )) && [[ "${f[0]}" == container ]]; then
    f=("${f[@]:1}")
  else
    f=()
    mapfile -t f < <(jq -r 'select(.provider == "container") | (.root // ""), (.nspawn_pid // "" | tostring),
      (.leader_pid // "" | tostring), (.lowers // [])[]' "$state" 2>/dev/null)
  fi
  (( ${#f[@]} >= 3 )) || return 1
  T_ROOT=${f[0]} T_NSPAWN=${f[1]} T_LEADER=${f[2]}
  T_LOWERS=("${f[@]:3}")
}

# referee_leader: set T_FOUND to the host PID of the container territory's init, "none" when
# the container is not running, "" when the territory is not a container (bash builtins only)
referee_leader() {
  local pid line init
  local -a kids=()
  T_FOUND=""
  territory_state || return 0
  read -r -a kids 2>/dev/null < "/proc/${T_NSPAWN:-0}/task/${T_NSPAWN:-0}/children"
  for pid in $T_LEADER "${kids[@]}"; do
    # the init's root directory is the territory's root (same file system and inode)
    [[ "/proc/$pid/root/" -ef "$T_ROOT/" ]] || continue
    init=""
    while IFS= read -r line; do
      if [[ "$line" == NSpid:* ]]; then [[ "$line" =~ [[:space:]]1$ ]] && init=1; break; fi
    done 2>/dev/null < "/proc/$pid/status"
    [[ -n "$init" ]] || continue
    T_FOUND=$pid
    return 0
  done
  T_FOUND=none
}

# territory_leader: host PID of the container territory's init; "none" when the container
# is not running; nothing when the territory is not a container
territory_leader() {
  local T_FOUND
  referee_leader
  printf '%s' "$T_FOUND"
}

# referee_check: set T_BAD to the REFEREE_BINARIES of a container territory that are not the
# image's (a different file, missing, or a symlink leaving the territory's root),
# space-separated. A path with no symlink below the root is compared as it is (one cmp);
# one with a symlink is resolved with realpath first
referee_check() {
  local root f low img real p
  T_BAD=""
  territory_state || return 0
  [[ -e "$T_ROOT" ]] || return 0
  root=""
  for f in "${REFEREE_BINARIES[@]}"; do
    img=""
    for low in "${T_LOWERS[@]}"; do
      if [[ -e "$low$f" || -L "$low$f" ]]; then img="$low$f"; break; fi
    done
    [[ -n "$img" ]] || continue
    real=$T_ROOT$f p=$f
    while [[ -n "$p" ]]; do
      if [[ -L "$T_ROOT$p" ]]; then
        root=${root:-$(realpath -e -- "$T_ROOT" 2>/dev/null)} || return 0
        real=$(realpath -e -- "$root$f" 2>/dev/null)
        [[ "$real" == "$root"/* ]] || real=""
        break
      fi
      p=${p%/*}
    done
    if [[ -z "$real" ]] || ! cmp -s -- "$img" "$real"; then T_BAD+="$f "; fi
  done
}

# referee_tampering: what referee_check finds (T_BAD), printed
referee_tampering() {
  local T_BAD
  referee_check
  printf '%s' "$T_BAD"
}

# what guest needs in a new shell (`bash -c "$(declare -p "${REFEREE_VARIABLES[@]}"; declare -f
# "${REFEREE_FUNCTIONS[@]}"); guest ..."`, e.g. under `timeout`)
REFEREE_VARIABLES=(REFEREE_PATH REFEREE_SSH_PATH REFEREE_BINARIES REFEREE_PYTHON REFEREE_ENTER REFEREE_PERL
  REFEREE_SYSCALLS REFEREE_ENTER_PERL)
REFEREE_FUNCTIONS=(guest territory_state territory_leader referee_leader referee_check referee_tampering)

# guest CMD...: run CMD (one shell string) as root in the territory, out of the player's
# reach (see above); exit 125 with "tampering: ..." on stderr when a binary the referee
# runs was replaced, 255 when the territory cannot be reached
guest() {
  local cmd="$*" T_READ="" T_ROOT T_NSPAWN T_LEADER T_FOUND T_BAD
  local -a T_LOWERS=()
  if territory_state; then T_READ=1; else T_READ=0; fi
  referee_leader
  if [[ -n "$T_FOUND" ]]; then
    if [[ "$T_FOUND" == none ]]; then
      printf '%s\n' "the territory's container is not running (no init to enter from the host)" >&2
      return 255
    fi
    referee_check
    if [[ -n "$T_BAD" ]]; then
      printf "tampering: the territory's %s is not the image's (the referee runs it)\n" "${T_BAD% }" >&2
      return 125
    fi
    set -- /usr/bin/env -i PATH="$REFEREE_PATH" HOME=/root LC_ALL=C /usr/bin/bash --noprofile --norc -c "$cmd"
    if [[ -n "$REFEREE_SYSCALLS" ]]; then
      "$REFEREE_PERL" -T -e "$REFEREE_ENTER_PERL" "$REFEREE_SYSCALLS" "$T_FOUND" "$@"
    else
      "$REFEREE_PYTHON" -I -S -c "$REFEREE_ENTER" "$T_FOUND" "$@"
    fi
    return
  fi
  sshpass -e ssh -p "$AOE_SSH_PORT" \
    -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR \
    -o PreferredAuthentications=password -o PubkeyAuthentication=no -o NumberOfPasswordPrompts=1 \
    -o ConnectTimeout="${SSH_CONNECT_TIMEOUT:-5}" -o ServerAliveInterval=2 -o ServerAliveCountMax=2 \
    "root@$AOE_HOST" "exec /usr/bin/env -i PATH=$REFEREE_SSH_PATH HOME=/root LC_ALL=C bash --noprofile --norc -c $(printf '%q' "$cmd")"
}

# service_listener PORT: "PID:START" (host PID and start time) of the process listening on
# TCP PORT in a container territory, seen from the host side; nothing when not a container
# or nothing listens. With the host's perl (REFEREE_LISTENER: one run, ~20 ms of CPU): the
# listening sockets on PORT in the kernel's tables of the territory's network namespace
# (/proc/LEADER/net/tcp, tcp6), then the first host process (lowest PID; those in that
# namespace first, then all) holding one of them. Without perl: the host's ss in that namespace
service_listener() {
  local T_FOUND pid
  referee_leader
  [[ -n "$T_FOUND" && "$T_FOUND" != none ]] || return 0
  if [[ -x "$REFEREE_PERL" ]]; then
    "$REFEREE_PERL" -T -e "$REFEREE_LISTENER" "$T_FOUND" "$1" 2>/dev/null
    return 0
  fi
  pid=$(nsenter --target "$T_FOUND" --net -- ss -Hltnp "sport = :$1" 2>/dev/null | grep -o 'pid=[0-9]*' | head -n 1 | cut -d= -f2)
  [[ -n "$pid" ]] || return 0
  printf '%s:%s' "$pid" "$(sed -E 's/^.*\) //' "/proc/$pid/stat" 2>/dev/null | cut -d' ' -f20)"
}
# perl -T -e "$REFEREE_LISTENER" LEADER PORT: prints "PID:START" (START: field 22 of
# /proc/PID/stat) of the process service_listener looks for, or nothing
REFEREE_LISTENER='
my ($leader, $port) = map { /\A(.*)\z/s; $1 } @ARGV;
my %ino;
for my $f ("tcp", "tcp6") {
    open(my $fh, "<", "/proc/$leader/net/$f") or next;
    while (<$fh>) {
        my @c = split;
        $ino{"socket:[$c[9]]"} = 1 if $c[3] eq "0A" and $c[1] =~ /:([0-9A-F]+)\z/ and hex($1) == $port;
    }
}
exit 0 unless %ino and opendir(my $d, "/proc");
my @pids = sort { $a <=> $b } grep { /\A\d+\z/ } readdir $d;
my $net = (stat "/proc/$leader/ns/net")[1];
for my $pass (1, 2) {
    for my $pid (@pids) {
        next if ($pass == 1) != ((stat "/proc/$pid/ns/net")[1] == $net);
        opendir(my $fds, "/proc/$pid/fd") or next;
        for my $fd (readdir $fds) {
            my $l = readlink("/proc/$pid/fd/$fd");
            next unless defined $l and $ino{$l};
            open(my $st, "<", "/proc/$pid/stat") or next;
            my $s = <$st>;
            $s =~ s/\A.*\) //s;
            printf "%s:%s", $pid, (split / /, $s)[19];
            exit 0;
        }
    }
}
'
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
# (InvocationID, or a non-zero MainPID, unchanged); nothing otherwise. Each "before|after
# UNIT KEY=" line counts once (the first); bash builtins only
restart_tampering() {
  local out=$1 u b a p line
  local -A v
  shift
  for u in "$@"; do
    v=()
    while IFS= read -r line; do
      [[ "$line" == "before $u "*=* || "$line" == "after $u "*=* ]] || continue
      [[ -n "${v["${line%%=*}"]+set}" ]] || v["${line%%=*}"]=${line#*=}
    done <<< "$out"
    b=${v["before $u InvocationID"]-} a=${v["after $u InvocationID"]-}
    if [[ -n "$b" && "$a" == "$b" ]]; then
      printf 'tampering: systemctl restart %s did not restart it (systemd InvocationID %s unchanged)' "$u" "$b"
      return 0
    fi
    b=${v["before $u MainPID"]-} a=${v["after $u MainPID"]-}
    if [[ -n "$b" && "$b" != 0 && "$a" == "$b" ]]; then
      printf "tampering: %s's main process (pid %s) did not change across the restart" "$u" "$b"
      return 0
    fi
    b=${v["before $u procs"]-} a=" ${v["after $u procs"]-} "
    for p in $b; do
      if [[ "$a" == *" $p "* ]]; then
        printf 'tampering: process %s of %s survived its restart' "$p" "$u"
        return 0
      fi
    done
  done
}

# without_ids OUT: OUT without the unit_ids lines (each other line with a newline)
without_ids() {
  local line re='^(before|after) [^ ]+ (MainPID=|InvocationID=|procs=)'
  while IFS= read -r line; do
    [[ "$line" =~ $re ]] || printf '%s\n' "$line"
  done <<< "$1"
}

# restart_unit [--reset-failed] UNIT [AFTER]: restart UNIT in the territory (guest, one call:
# `systemctl reset-failed UNIT` first with --reset-failed, so an earlier start limit does not
# refuse the restart; then `systemctl restart UNIT`; then AFTER, guest shell text run whatever
# the restart did) and prove it restarted (unit_ids before and after, restart_tampering).
# Sets RESTART_OUT: the guest's output without the unit_ids lines (the restart's messages,
# then AFTER's). Returns 0 when UNIT was restarted; otherwise fails (one line, exit 1): the
# referee's binaries replaced (the "tampering: ..." line), the territory not reachable
# (exit 255), the restart failed (its first line), or UNIT not really restarted (tampering).
# Needs load_password first on SSH territories.
RESTART_OUT=""
restart_unit() {
  local reset="" out rc tampering said
  if [[ "$1" == --reset-failed ]]; then reset="systemctl reset-failed $2 >/dev/null 2>&1; "; shift; fi
  out=$(guest "$(unit_ids before "$1")${reset}systemctl restart $1 2>&1; rc=\$?; $(unit_ids after "$1")${2:-}
exit \$rc" 2>&1)
  rc=$?
  tampering=$(restart_tampering "$out" "$1")
  RESTART_OUT=$(without_ids "$out")
  said=$(printf '%s\n' "$RESTART_OUT" | head -n 1 | head -c 200)
  [[ $rc != 125 ]] || fail "$said"
  [[ $rc != 255 ]] || fail "cannot reach the territory to restart $1: ${said:-exit 255 without a message}"
  [[ $rc == 0 ]] || fail "systemctl restart $1 failed (exit $rc): $said"
  [[ -z "$tampering" ]] || fail "$tampering"
}
# --- end of the referee's access block ----------------------------------------------------

# json_str VALUE: VALUE as a JSON string, byte for byte what `jq -cn --arg s VALUE '$s'`
# prints; strings made only of the characters listed below need no escaping and are quoted
# without a jq run (jq 1.6 costs ~45 ms of CPU a start), any other string goes to jq
json_str() {
  if [[ -z "${1//[abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 _.:\/+=@,%-]/}" ]]; then
    printf '"%s"' "$1"
  else
    jq -cn --arg s "$1" '$s'
  fi
}

# json_field FILE KEY: a JSON answer's top-level field KEY as text (jq -r's; objects and
# arrays as JSON), empty when FILE is not a JSON object or has no such field (one jq run)
json_field() {
  jq -r --arg k "$2" 'if type == "object" then .[$k] // "" | tostring else "" end' "$1" 2>/dev/null
}

# write_evidence JSON: store the evidence (must be valid JSON) at AOE_EVIDENCE_FILE
write_evidence() {
  local tmp="$AOE_EVIDENCE_FILE.tmp.$$"
  printf '%s\n' "$1" > "$tmp" && mv -f "$tmp" "$AOE_EVIDENCE_FILE" || fail "cannot write evidence file $AOE_EVIDENCE_FILE"
}

# now_s: wall-clock seconds (integer) for poll deadlines; now_ms: milliseconds
now_s() { printf '%s' "$EPOCHSECONDS"; }
now_ms() { local t=${EPOCHREALTIME/[.,]/}; printf '%s' $((t / 1000)); }
