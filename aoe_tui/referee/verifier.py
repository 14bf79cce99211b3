"""The verifier runner: one arena verifier run against one territory (spec §4).

The verifier file is executed directly (no arguments, no shell), with the
runner's environment and current directory, plus exactly these ``AOE_*``
variables (any ``AOE_*`` inherited from the runner's own environment is dropped
first, so a verifier never sees stale values):

======================  ==========================================================
``AOE_TERRITORY_ID``    territory id
``AOE_HOST``            ``territory.host`` (``127.0.0.1`` for port forwards, the
                        veth address for containers)
``AOE_SSH_PORT``        the guest's SSH port as seen from the runner
``AOE_SERVICE_PORT``    the guest's service port as seen from the runner
``AOE_CREDENTIAL_FILE`` the territory's ``KEY=VALUE`` credential file (§5.1)
``AOE_PREVIOUS_EVIDENCE`` ``evidence/<territory>/previous.json``, rewritten before
                        each run with the territory's ``milestones`` map
``AOE_EVIDENCE_FILE``   ``evidence/<territory>/<milestone>.json`` (the verifier writes it)
======================  ==========================================================

Beside ``previous.json`` the runner writes ``previous.fields`` (ours, not upstream's; see
:func:`previous_fields_bytes`): the same evidence fields in a form the arenas' ``lib.sh``
reads with bash builtins instead of a jq run.

``TMPDIR`` is set to the heat's scratch folder (:func:`verifier_tmpdir`), removed at the
heat's end.

Pass iff the process exits 0 **and** the evidence file parses as JSON (any value).
Failure details follow §3.9 exactly: ``"verifier timed out"``,
``"verifier produced no evidence: <io error>"``, ``"invalid evidence: <json error>"``,
otherwise the verifier's stderr, trimmed (stdout is discarded).

The blocking part of a start (``previous.json``, stale evidence, fork/exec) runs on
a starter thread and the exit is awaited through a pidfd, so the referee's loop never
waits for the disk or for the kernel to schedule a new child
(:mod:`aoe_tui.runtime.procs`).

Unlike upstream (which abandons the wait), a verifier that exceeds its
``timeout_seconds`` is killed together with its whole process group (it is
started in a new session), so no process is left behind. Processes a verifier
deliberately detaches into their *own* session (long-running monitors, §4)
survive a normal exit. stderr goes to an anonymous temporary file, not a pipe,
so a background child holding it open cannot stall the runner.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import functools
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aoe_tui.fsio import is_no_space, sweep_pid_folders, write_atomic
from aoe_tui.runtime.procs import Starter, wait_exited

__all__ = ["SHELL_DEFINITION_RE", "VERIFY_KIT", "VERIFY_KIT_ENV", "kit_names", "VerifierOutcome", "end_leftover_verifiers", "previous_evidence_json", "previous_fields_bytes", "run_verifier",
           "verifier_env", "verifier_tmpdir"]

#: Upper bound on the stderr kept as a failure detail (characters).
MAX_DETAIL_CHARS = 4000


@dataclass(frozen=True)
class VerifierOutcome:
    """Result of one verifier run.

    Attributes:
        passed: exit 0 and valid JSON evidence.
        evidence: the parsed evidence (any JSON value) when ``passed``; else None.
        detail: failure detail per §3.9 when not ``passed``; else None.
        duration_ms: wall time of the run in milliseconds.
        exit_code: process exit status (negative = killed by that signal), None if it
            never started or was killed at the timeout.
        timed_out: True when it was killed at ``timeout_seconds``.
    """

    passed: bool
    evidence: Any = None
    detail: str | None = None
    duration_ms: int = 0
    exit_code: int | None = None
    timed_out: bool = False


def previous_evidence_json(milestones: dict[str, Any]) -> str:
    """The text of ``previous.json`` (§4): ``{milestone id: MilestoneView dict}``.

    ``milestones`` is the territory's ``milestones`` map from the world (pydantic
    views or plain dicts); keys are written sorted, as upstream's world map is.
    """
    from aoe_tui.domain.world import pretty_json, sort_json

    data = {}
    for mid in sorted(milestones):
        view = milestones[mid]
        if hasattr(view, "model_dump"):
            view = view.model_dump(mode="json", by_alias=True)
        data[mid] = {**view, "evidence": sort_json(view.get("evidence"))}
    return pretty_json(data)


#: name of the companion of ``previous.json`` (same folder), see :func:`previous_fields_bytes`
PREVIOUS_FIELDS_FILE = "previous.fields"
#: integers jq 1.6 (IEEE doubles, ``%.17g``) prints exactly as Python does
_JQ_EXACT_INT = 2**53


def _jq_tostring(value: Any) -> bytes | None:
    """What ``$(jq -r '... // empty | tostring')`` gives bash for one evidence value: ``b""``
    for null and false (``// empty``), the UTF-8 of a string without its NUL bytes (bash drops
    them), ``true``, an integer of magnitude below 2**53 in decimal; None for what only jq
    renders exactly (floats, whose text differs between jq versions and for ``-0.0``, larger
    integers, arrays, objects, unencodable strings)."""
    if value is None or value is False:
        return b""
    if value is True:
        return b"true"
    if isinstance(value, str):
        try:
            return value.replace("\0", "").encode("utf-8")
        except UnicodeEncodeError:
            return None
    # a float never (``-0.0``: jq 1.6 prints ``-0``; ``1.0``: jq 1.7 keeps the literal ``1.0``)
    if isinstance(value, int) and abs(value) < _JQ_EXACT_INT:
        return str(value).encode()
    return None


def previous_fields_bytes(milestones: dict[str, Any]) -> bytes | None:
    """The content of ``previous.fields``, ours: the evidence fields of ``previous.json``
    (same ``milestones`` map as :func:`previous_evidence_json`) for lib.sh's
    ``previous_fields``, read with ``mapfile -d ''`` (no jq run, no eval).

    Format: for each milestone (sorted; ids with a ``.`` are left out: lib.sh cannot name
    them) whose evidence is a JSON object, for each field with a value other than null and
    false, three NUL-terminated strings: the milestone id, the field name, then ``s`` followed
    by the value exactly as ``jq -r '... | tostring'`` prints it once bash has read it (see
    :func:`_jq_tostring`), or ``j`` alone for a value only jq renders exactly (the reader
    then asks jq). Returns None when a name cannot be written (a NUL or an unencodable
    character in it): no companion, the reader uses ``previous.json`` with jq."""
    out = bytearray()
    for mid in sorted(milestones):
        view = milestones[mid]
        if hasattr(view, "model_dump"):
            view = view.model_dump(mode="json", by_alias=True)
        evidence = view.get("evidence") if isinstance(view, dict) else None
        if "." in mid or not isinstance(evidence, dict):
            continue
        for key, value in evidence.items():
            text = _jq_tostring(value)
            if text == b"":
                continue
            try:
                names = [mid.encode("utf-8"), key.encode("utf-8")]
            except UnicodeEncodeError:
                return None
            if any(b"\0" in n for n in names):
                return None
            out += names[0] + b"\0" + names[1] + b"\0" + (b"j" if text is None else b"s" + text) + b"\0"
    return bytes(out)


#: The verifier toolkit every verifier may source (``aoe_tui/referee/kit/verify.sh``: the
#: referee's guest access, HTTP, evidence and earlier-evidence helpers; docs/arena-packages.md).
VERIFY_KIT = Path(__file__).resolve().parent / "kit" / "verify.sh"
#: The variable naming it in the verifier environment (ours, not one of upstream's §4 set).
VERIFY_KIT_ENV = "AOE_TUI_VERIFY_KIT"
#: A shell function (``name() ``) or variable (``NAME=``) defined at a line's start.
SHELL_DEFINITION_RE = re.compile(r"^([A-Za-z_][A-Za-z_0-9]*)(?:\(\) |=)", re.M)


@functools.cache
def kit_names() -> frozenset[str]:
    """The names the verifier toolkit defines (functions and variables, by
    :data:`SHELL_DEFINITION_RE`), which a package's verifiers must not redefine."""
    return frozenset(SHELL_DEFINITION_RE.findall(VERIFY_KIT.read_text(encoding="utf-8")))


def verifier_env(
    *,
    territory_id: str,
    host: str,
    ssh_port: int,
    service_port: int,
    credential_file: Path | str,
    previous_evidence: Path,
    evidence_file: Path,
    base: dict[str, str] | None = None,
) -> dict[str, str]:
    """The verifier's environment: ``base`` (default ``os.environ``) minus any ``AOE_*``,
    plus the seven ``AOE_*`` variables of §4 (paths made absolute) and our own
    ``AOE_TUI_VERIFY_KIT`` (:data:`VERIFY_KIT`, the verifier toolkit's path)."""
    env = {k: v for k, v in (os.environ if base is None else base).items() if not k.startswith("AOE_")}
    env.update(
        AOE_TERRITORY_ID=territory_id,
        AOE_HOST=host,
        AOE_SSH_PORT=str(ssh_port),
        AOE_SERVICE_PORT=str(service_port),
        AOE_CREDENTIAL_FILE=str(Path(credential_file).absolute()),
        AOE_PREVIOUS_EVIDENCE=str(previous_evidence.absolute()),
        AOE_EVIDENCE_FILE=str(evidence_file.absolute()),
    )
    env[VERIFY_KIT_ENV] = str(VERIFY_KIT)
    return env


def _missing_kit_hint(stderr: str) -> str:
    """A hint for a verifier that called a toolkit function it never sourced (bash's ``NAME:
    command not found``, dash's ``NAME: not found``, for a name :func:`kit_names` holds), to append to its failure
    detail; ``""`` otherwise."""
    missing = [n for n in dict.fromkeys(re.findall(r": ([A-Za-z_][A-Za-z_0-9]*): (?:command )?not found", stderr))
               if n in kit_names()]
    if not missing:
        return ""
    return (f" (hint: {', '.join(missing[:3])} {'is' if len(missing) == 1 else 'are'} the verifier toolkit's: "
            f"source the package's verify/lib.sh, which sources \"${VERIFY_KIT_ENV}\")")


#: name prefix of the heats' verifier ``TMPDIR`` folders (see :func:`verifier_tmpdir`)
TMPDIR_PREFIX = "aoe-verifiers-"
#: each heat's verifier ``TMPDIR`` by its absolute ``evidence/`` folder (see :func:`verifier_tmpdir`)
_TMPDIRS: dict[str, Path] = {}


def verifier_tmpdir(evidence_root: Path) -> Path:
    """The ``TMPDIR`` every verifier of one heat gets: a fresh private folder
    (``mkdtemp``: ``<tmp>/aoe-verifiers-<runner pid>-XXXXXXXX``, mode 0700, so no other
    local user can plant it in advance) made on first use for the heat's ``evidence/``
    folder; making one also removes those of runners that are gone (killed). A verifier
    killed at its timeout or at the finish (SIGKILL: its exit traps never run) leaves its
    scratch files there; :func:`end_leftover_verifiers` removes the folder when the heat ends."""
    key = str(Path(evidence_root).absolute())
    folder = _TMPDIRS.get(key)
    if folder is None or not folder.is_dir():
        sweep_pid_folders(TMPDIR_PREFIX)  # those of runners that were killed
        folder = _TMPDIRS[key] = Path(tempfile.mkdtemp(prefix=f"{TMPDIR_PREFIX}{os.getpid()}-"))
    return folder


def _start(verifier: Path, env: dict[str, str], previous_file: Path, previous_text: str,
           evidence_file: Path, fields: bytes | None = None) -> tuple[subprocess.Popen, Any]:
    """The blocking part of a verifier run (on a starter thread): write ``previous.json``
    (text made on the loop, from the world as it was), then its companion ``previous.fields``
    (``fields``; removed when None, so a verifier reads ``previous.json``), remove stale
    evidence, start the process. Returns it and its stderr file."""
    evidence_file.parent.mkdir(parents=True, exist_ok=True)
    previous_file.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(previous_file, previous_text, fsync=False)
    companion = previous_file.with_name(PREVIOUS_FIELDS_FILE)
    if fields is None:
        with contextlib.suppress(FileNotFoundError):
            companion.unlink()
    else:  # after previous.json: never older than the previous.json it mirrors
        write_atomic(companion, fields, fsync=False)
    with contextlib.suppress(FileNotFoundError):
        evidence_file.unlink()
    err_fh = tempfile.TemporaryFile()
    try:
        proc = subprocess.Popen(
            [str(verifier)], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err_fh,
            env=env, start_new_session=True,
        )
    except BaseException:
        err_fh.close()
        raise
    return proc, err_fh


def _abandon(started: tuple[subprocess.Popen, Any]) -> None:
    """A verifier started for a task that was cancelled meanwhile: kill and reap it."""
    proc, err_fh = started
    err_fh.close()
    _kill_group(proc.pid)
    proc.wait()


def _reap_cancelled(proc: subprocess.Popen, evidence_file: Path) -> None:
    """A verifier killed because its task was cancelled (the match finished or was
    aborted): reap it, then remove the evidence it may have written — a run that was
    not judged credits nothing, so it leaves no evidence file (on a starter thread)."""
    proc.wait()
    with contextlib.suppress(OSError):
        evidence_file.unlink()


_starter: Starter | None = None
_starter_lock = threading.Lock()
#: verifier starter threads: starts are short (milliseconds), so a few serve every heat
STARTER_THREADS = 4


def verifier_starter() -> Starter:
    """The process's verifier :class:`~aoe_tui.runtime.procs.Starter` (created on the first
    call, at the calling thread's scheduling policy: :class:`~aoe_tui.referee.supervisor.HeatSupervisor` calls it
    when a heat starts, before the first tick)."""
    global _starter
    with _starter_lock:
        if _starter is None:
            _starter = Starter(STARTER_THREADS, name="aoe-verifier-start")
        return _starter


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _io_error_text(err: OSError) -> str:
    """Rust-like io error text: ``No such file or directory (os error 2)``."""
    if err.errno is not None and err.strerror:
        return f"{err.strerror} (os error {err.errno})"
    return str(err)


async def run_verifier(
    verifier: Path,
    *,
    territory_id: str,
    milestone_id: str,
    host: str,
    ssh_port: int,
    service_port: int,
    credential_file: Path | str,
    evidence_dir: Path,
    previous: dict[str, Any],
    timeout_s: float,
) -> VerifierOutcome:
    """Run ``verifier`` once for ``territory_id`` / ``milestone_id`` and judge it (§4, §3.9).

    Args:
        verifier: path of the executable (``arena_dir / milestone.verifier``).
        evidence_dir: ``<match>/evidence/<territory>/``; created if missing. The
            stale ``<milestone>.json`` from an earlier attempt is removed before the
            run, so a verifier that exits 0 without writing evidence fails.
        previous: the territory's milestone views (current one ``evaluating: true``)
            written to ``previous.json`` (and ``previous.fields``) before the run.
        timeout_s: ``timeout_seconds`` of the milestone (seconds); on expiry the whole
            process group is killed with SIGKILL.

    Returns a :class:`VerifierOutcome`; never raises for verifier misbehaviour (a
    missing or non-executable file is a failed outcome with a clear detail). Raises
    ``OSError`` when the runner itself cannot start it (a full disk: ``ENOSPC``; writing
    ``previous.json`` or the evidence folder). If the
    awaiting task is cancelled (the match finished or was aborted while the verifier ran),
    the process group is killed with SIGKILL before re-raising; the process is then
    reaped off the loop and ``<milestone>.json`` removed, so an unjudged run leaves no
    evidence.
    """
    previous_file = evidence_dir / "previous.json"
    evidence_file = evidence_dir / f"{milestone_id}.json"
    env = verifier_env(
        territory_id=territory_id,
        host=host,
        ssh_port=ssh_port,
        service_port=service_port,
        credential_file=credential_file,
        previous_evidence=previous_file,
        evidence_file=evidence_file,
    )
    env["TMPDIR"] = str(verifier_tmpdir(evidence_dir.parent))
    started = time.monotonic()

    def elapsed() -> int:
        return int((time.monotonic() - started) * 1000)

    try:
        proc, err_fh = await verifier_starter().run(
            _start, verifier, env, previous_file, previous_evidence_json(previous), evidence_file,
            previous_fields_bytes(previous), abandon=_abandon
        )
    except OSError as err:
        if is_no_space(err) or (err.filename is not None and Path(err.filename) != Path(verifier)):
            raise  # a full disk, the evidence folder or previous.json: the runner's failure, not the verifier's
        if err.errno == errno.ENOENT:
            what = "verifier not found"
        elif err.errno in (errno.EACCES, errno.EPERM):
            what = "verifier is not executable"
        elif err.errno == errno.ENOEXEC:
            what = "verifier has no interpreter line (exec format error)"
        else:
            what = f"verifier could not start: {_io_error_text(err)}"
        return VerifierOutcome(passed=False, detail=f"{what}: {verifier}", duration_ms=elapsed())
    try:
        pgid = proc.pid  # start_new_session: the child leads its own group
        try:
            code = await asyncio.wait_for(wait_exited(proc), timeout=max(0.001, timeout_s))
        except asyncio.TimeoutError:
            _kill_group(pgid)
            await wait_exited(proc)
            return VerifierOutcome(passed=False, detail="verifier timed out", duration_ms=elapsed(), timed_out=True)
        except BaseException:
            _kill_group(pgid)
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            verifier_starter().submit(_reap_cancelled, proc, evidence_file)  # off the loop
            raise
        if code != 0:
            err_fh.seek(0)
            text = err_fh.read().decode("utf-8", errors="replace").strip()
            if len(text) > MAX_DETAIL_CHARS:
                text = "…" + text[-MAX_DETAIL_CHARS:]
            if not text:
                text = f"verifier exited with status {code}" if code > 0 else f"verifier killed by signal {-code}"
            return VerifierOutcome(passed=False, detail=text + _missing_kit_hint(text), duration_ms=elapsed(),
                                   exit_code=code)
    finally:
        verifier_starter().submit(err_fh.close)  # freeing its blocks may wait for the disk
    try:
        raw = evidence_file.read_bytes()
    except OSError as err:
        return VerifierOutcome(
            passed=False,
            detail=f"verifier produced no evidence: {_io_error_text(err)}",
            duration_ms=elapsed(),
            exit_code=0,
        )
    try:
        evidence = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as err:
        return VerifierOutcome(passed=False, detail=f"invalid evidence: {err}", duration_ms=elapsed(), exit_code=0)
    return VerifierOutcome(passed=True, evidence=evidence, duration_ms=elapsed(), exit_code=0)


def end_leftover_verifiers(evidence_root: Path) -> int:
    """SIGKILL every process still running for a heat's verifiers; returns how many.

    A verifier may leave a monitor running after it exits (§4: zero-downtime-rollout's
    continuity monitor), which the runner neither waits for nor kills at the verifier's
    exit. When the heat ends, whatever is left is found by its environment: processes
    (and their children, which inherit it) whose ``AOE_EVIDENCE_FILE`` lies under
    ``evidence_root`` (the heat's ``evidence/`` folder). Nothing else is touched, except
    the heat's verifier ``TMPDIR`` (:func:`verifier_tmpdir`), which is then removed, and the
    toolkit's ``write_evidence`` temporaries (``evidence/*/*.json.tmp.PID``) a killed
    verifier left.
    """
    root = str(Path(evidence_root).absolute()).encode() + b"/"
    needle = b"AOE_EVIDENCE_FILE=" + root
    me = os.getpid()
    killed = 0
    try:
        pids = [int(d) for d in os.listdir("/proc") if d.isdigit()]
    except OSError:
        return 0
    for pid in pids:
        if pid == me:
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as fh:
                env = fh.read()
        except OSError:
            continue
        if any(item.startswith(needle) for item in env.split(b"\0")):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
                killed += 1
    scratch = _TMPDIRS.pop(str(Path(evidence_root).absolute()), None)
    if scratch is not None:
        shutil.rmtree(scratch, ignore_errors=True)
    # the verifier toolkit's write_evidence temporaries (MILESTONE.json.tmp.PID) of verifiers
    # killed between writing and renaming (at the finish): not evidence, not kept
    for tmp in Path(evidence_root).glob("*/*.json.tmp.*"):
        with contextlib.suppress(OSError):
            tmp.unlink()
    return killed
