"""The verifier runner (spec §4, §3.9) against real verifier processes."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from aoe_tui.referee.verifier import VERIFY_KIT, end_leftover_verifiers, run_verifier, verifier_tmpdir


def _script(path: Path, body: str, mode: int = 0o755) -> Path:
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(mode)
    return path


async def _run(tmp_path: Path, verifier: Path, *, previous=None, timeout_s: float = 5.0, milestone="service-up"):
    cred = tmp_path / "cred.env"
    cred.write_text("AOE_SSH_PASSWORD=x\n")
    return await run_verifier(
        verifier,
        territory_id="builder-one",
        milestone_id=milestone,
        host="10.78.0.10",
        ssh_port=22,
        service_port=8080,
        credential_file=cred,
        evidence_dir=tmp_path / "evidence" / "builder-one",
        previous=previous or {},
        timeout_s=timeout_s,
    )


async def test_pass_exact_env_and_previous(tmp_path, monkeypatch):
    monkeypatch.setenv("AOE_STALE_VALUE", "leak")
    monkeypatch.setenv("KEEP_ME", "kept")
    v = _script(
        tmp_path / "v.sh",
        'env | grep -E "^(AOE_|KEEP_ME=)" | sort > "$AOE_EVIDENCE_FILE.env"\n'
        'pwd > "$AOE_EVIDENCE_FILE.cwd"\n'
        'cp "$AOE_PREVIOUS_EVIDENCE" "$AOE_EVIDENCE_FILE.prev"\n'
        'printf \'{"health":"ready"}\' > "$AOE_EVIDENCE_FILE"\n',
    )
    prev = {
        "service-up": {
            "evaluating": True,
            "passed": False,
            "points": 0,
            "evidence": None,
            "failure_category": None,
            "failure_detail": None,
        }
    }
    out = await _run(tmp_path, v, previous=prev)
    assert out.passed and out.evidence == {"health": "ready"} and out.detail is None
    ev_dir = tmp_path / "evidence" / "builder-one"
    env = dict(line.split("=", 1) for line in (ev_dir / "service-up.json.env").read_text().splitlines())
    assert env == {
        "AOE_TERRITORY_ID": "builder-one",
        "AOE_HOST": "10.78.0.10",
        "AOE_SSH_PORT": "22",
        "AOE_SERVICE_PORT": "8080",
        "AOE_CREDENTIAL_FILE": str((tmp_path / "cred.env").absolute()),
        "AOE_PREVIOUS_EVIDENCE": str((ev_dir / "previous.json").absolute()),
        "AOE_EVIDENCE_FILE": str((ev_dir / "service-up.json").absolute()),
        "AOE_TUI_VERIFY_KIT": str(VERIFY_KIT),  # ours, beside §4's seven
        "KEEP_ME": "kept",
    }
    assert VERIFY_KIT.is_file()
    assert (ev_dir / "service-up.json.cwd").read_text().strip() == os.getcwd()
    assert json.loads((ev_dir / "service-up.json.prev").read_text()) == prev


async def test_failure_details(tmp_path):
    out = await _run(tmp_path, _script(tmp_path / "a.sh", "echo out; echo '  boom: no\n' >&2; exit 7\n"))
    assert not out.passed and out.detail == "boom: no" and out.exit_code == 7
    out = await _run(tmp_path, _script(tmp_path / "b.sh", "exit 0\n"))
    assert out.detail == "verifier produced no evidence: No such file or directory (os error 2)"
    out = await _run(tmp_path, _script(tmp_path / "c.sh", "echo '{not json' > \"$AOE_EVIDENCE_FILE\"\n"))
    assert not out.passed and out.detail.startswith("invalid evidence: ")
    out = await _run(tmp_path, _script(tmp_path / "d.sh", "exit 3\n"))
    assert out.detail == "verifier exited with status 3"
    # a verifier that never sourced the toolkit: bash's own lines, then a hint naming the toolkit
    out = await _run(tmp_path, _script(tmp_path / "e.sh", "need_env AOE_HOST\nmy_own_helper\nfail 'no toolkit'\n"))
    assert not out.passed and out.detail.endswith(
        ": fail: not found (hint: need_env, fail are the verifier toolkit's: source the package's "
        'verify/lib.sh, which sources "$AOE_TUI_VERIFY_KIT")'), out.detail
    assert "my_own_helper: not found\n" in out.detail  # (sh's words; bash says "command not found")


async def test_stale_evidence_does_not_pass(tmp_path):
    ev_dir = tmp_path / "evidence" / "builder-one"
    ev_dir.mkdir(parents=True)
    (ev_dir / "service-up.json").write_text('{"stale": true}')
    out = await _run(tmp_path, _script(tmp_path / "v.sh", "exit 0\n"))
    assert not out.passed and "produced no evidence" in out.detail


async def test_missing_and_not_executable(tmp_path):
    out = await _run(tmp_path, tmp_path / "nope.sh")
    assert not out.passed and out.detail == f"verifier not found: {tmp_path / 'nope.sh'}"
    v = _script(tmp_path / "v.sh", "exit 0\n", mode=0o644)
    out = await _run(tmp_path, v)
    assert not out.passed and out.detail.startswith("verifier is not executable: ")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is not "left behind" work, but we reap nothing here: check its state
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


async def test_timeout_kills_whole_process_group(tmp_path):
    pids = tmp_path / "pids"
    v = _script(
        tmp_path / "hang.sh",
        f'sleep 300 & echo $! >> {pids}\n(sleep 301; echo x) & echo $! >> {pids}\necho $$ >> {pids}\nwait\n',
    )
    started = time.monotonic()
    out = await _run(tmp_path, v, timeout_s=1.0)
    took = time.monotonic() - started
    assert not out.passed and out.timed_out and out.detail == "verifier timed out"
    assert took < 4
    listed = [int(p) for p in pids.read_text().split()]
    assert len(listed) == 3
    time.sleep(0.2)
    assert not [p for p in listed if _alive(p)]
    # and no process anywhere still runs our script
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                cmd = (proc / "cmdline").read_bytes()
            except OSError:
                continue
            assert str(v).encode() not in cmd


async def test_scratch_of_a_killed_verifier_is_removed_at_heat_end(tmp_path):
    """A verifier killed at its timeout never runs its exit trap: what it made under its
    TMPDIR (one folder per heat, outside the match folder) goes when the heat ends."""
    v = _script(tmp_path / "scratch.sh",
                'work=$(mktemp -d); trap \'rm -rf "$work"\' EXIT\n'
                'echo "$work" > "$AOE_EVIDENCE_FILE.work"\nsleep 300\n')
    out = await _run(tmp_path, v, timeout_s=1.0)
    assert out.timed_out
    work = Path((tmp_path / "evidence" / "builder-one" / "service-up.json.work").read_text().strip())
    heat_tmp = verifier_tmpdir(tmp_path / "evidence")
    assert work.parent == heat_tmp and work.is_dir()  # the trap never ran
    # the toolkit's write_evidence temporary of a verifier killed before its rename goes too
    ev = tmp_path / "evidence" / "builder-one"
    (ev / "service-up.json.tmp.1068").write_text('{"health":')
    (ev / "write-read.json").write_text('{"record":"r"}')
    assert end_leftover_verifiers(tmp_path / "evidence") == 0
    assert not heat_tmp.exists()
    assert not (ev / "service-up.json.tmp.1068").exists() and (ev / "write-read.json").is_file()
    # a killed runner's folder is removed by the next heat's first verifier
    import subprocess
    import sys

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    orphan = heat_tmp.parent / f"aoe-verifiers-{int(dead.stdout)}-abcdefgh"
    (orphan / "scratch").mkdir(parents=True)
    verifier_tmpdir(tmp_path / "evidence2")
    assert not orphan.exists()
    end_leftover_verifiers(tmp_path / "evidence2")


async def test_background_child_holding_stderr_does_not_stall(tmp_path):
    """A detached monitor (own session) that keeps stderr open must not block the runner."""
    pidfile = tmp_path / "mon.pid"
    v = _script(
        tmp_path / "mon.sh",
        f'setsid sh -c "sleep 30" & echo $! > {pidfile}\nprintf 1 > "$AOE_EVIDENCE_FILE"\n',
    )
    started = time.monotonic()
    out = await _run(tmp_path, v, timeout_s=10)
    assert out.passed and out.evidence == 1
    assert time.monotonic() - started < 5
    os.kill(int(pidfile.read_text()), 9)


@pytest.mark.parametrize("evidence", ["null", "[1, 2]", '"text"'])
async def test_any_json_value_is_evidence(tmp_path, evidence):
    v = _script(tmp_path / "v.sh", f"printf '%s' '{evidence}' > \"$AOE_EVIDENCE_FILE\"\n")
    out = await _run(tmp_path, v)
    assert out.passed and out.evidence == json.loads(evidence)



async def test_previous_fields_companion_serves_lib_sh(tmp_path):
    """The runner writes ``previous.fields`` after ``previous.json``; first-build's lib.sh reads
    the earlier evidence from it without a jq run (a jq on PATH that fails would empty the
    fields), and the next run rewrites it for the new milestone map."""
    lib = Path(__file__).resolve().parent.parent / "arenas" / "first-build" / "verify" / "lib.sh"
    (tmp_path / "bin").mkdir()
    _script(tmp_path / "bin" / "jq", "exit 3\n")
    v = tmp_path / "v.sh"
    v.write_text(f'#!/bin/bash\nPATH={tmp_path / "bin"}:$PATH\n. "{lib}"\n'
                 'previous_fields r=write-read.record v=write-read.value b=service-restart.boot_id\n'
                 '[[ ! "${AOE_PREVIOUS_EVIDENCE%/*}/previous.fields" -ot "$AOE_PREVIOUS_EVIDENCE" ]] || exit 4\n'
                 'write_evidence "[$(json_str "$r"),$(json_str "$v"),$(json_str "$b")]"\n')
    v.chmod(0o755)
    prev = {"write-read": {"passed": True, "evidence": {"record": "r-1", "value": "two words\n"}},
            "service-restart": {"evaluating": True, "evidence": None}}
    out = await _run(tmp_path, v, previous=prev, milestone="service-restart")
    assert out.passed and out.evidence == ["r-1", "two words", ""], out
    prev["service-restart"] = {"passed": True, "evidence": {"boot_id": "b-2"}}
    prev["host-reboot"] = {"evaluating": True, "evidence": None}
    out = await _run(tmp_path, v, previous=prev, milestone="host-reboot")
    assert out.passed and out.evidence == ["r-1", "two words", "b-2"], out
