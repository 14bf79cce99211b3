"""first-build's ``verify/lib.sh``: ``previous_fields`` gives each field byte for byte what
the jq expression the verifiers used to run for it (``previous_field``'s former one jq run
each) gives, on real bash and jq, for ordinary, absent, odd and broken evidence files: read
from our runner's ``previous.fields`` companion (no jq), from ``previous.json`` alone (jq, as
under upstream's runner), and ignoring a stale companion."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from aoe_tui.referee.verifier import previous_fields_bytes

LIB = Path(__file__).resolve().parent.parent / "arenas" / "first-build" / "verify" / "lib.sh"
FIELDS = [("write-read", "record"), ("write-read", "value"), ("service-restart", "boot_id"),
          ("service-restart", "absent"), ("missing-milestone", "record"), ("write-read", "n"),
          ("write-read", "x.y")]
CASES = {
    "ordinary": {"write-read": {"evidence": {"record": "r-0a1b", "value": "v-9f"}},
                 "service-restart": {"evidence": {"boot_id": "a725d546-8103"}}},
    "odd strings": {"write-read": {"evidence": {"record": "it's \"q\" $(x) `y` \\ é\u0001 \u0000nul",
                                                "value": "two\nlines\n\n", "x.y": "dot\0ted", "n": "-"}},
                    "service-restart": {"evidence": {"boot_id": "", "absent": None}}},
    "non-strings": {"write-read": {"evidence": {"record": 42, "value": {"a": [1, True]}, "n": 2**60, "x.y": 1.0}},
                    "service-restart": {"evidence": {"boot_id": False, "absent": True}}},
    "floats": {"write-read": {"evidence": {"record": 0.1, "value": -7, "n": 1e17, "x.y": [0.5]}}},
    "integral floats": {"write-read": {"evidence": {"record": -0.0, "value": 3.0}}},
    "evidence not an object": {"write-read": {"evidence": "text"}, "service-restart": {"evidence": [1]}},
    "top not an object": [1, 2],
}


def _jq_each(path: Path) -> bytes:
    """Each field as ``$(jq -r '(.[M].evidence // {})[F] // empty | tostring' FILE)`` gives
    it to bash (NUL-terminated), the expression previous_field ran before the companion."""
    out = b""
    for m, f in FIELDS:
        script = ('v=$(jq -r --arg m "$1" --arg f "$2" \'(.[$m].evidence // {})[$f] // empty | tostring\' "$3" '
                  '2>/dev/null); printf "%s\\0" "$v"')
        out += subprocess.run(["bash", "-c", script, "_", m, f, str(path)], capture_output=True, timeout=30).stdout
    return out


@pytest.mark.skipif(shutil.which("jq") is None, reason="jq not installed")
def test_previous_fields_matches_jq(tmp_path):
    files = {}
    for i, (name, data) in enumerate(CASES.items()):
        files[name] = tmp_path / f"ev{i}" / "previous.json"
        files[name].parent.mkdir()
        files[name].write_text(json.dumps(data))
    files["broken json"] = tmp_path / "broken" / "previous.json"
    files["broken json"].parent.mkdir()
    files["broken json"].write_text('{"write-read": {"evidence": {"record": "x"')
    files["no file"] = tmp_path / "absent" / "previous.json"
    names = " ".join(f"f{i}={m}.{f}" for i, (m, f) in enumerate(FIELDS))
    many = f'previous_fields {names}; printf "%s\\0" ' + " ".join(f'"$f{i}"' for i in range(len(FIELDS)))
    one = "; ".join(f'printf "%s\\0" "$(previous_field {m} {f})"' for m, f in FIELDS)
    script = f'. "{LIB}"; {many}; printf "|"; {one}'
    used_companion = 0
    for name, path in files.items():
        want = _jq_each(path)
        companion = path.parent / "previous.fields"
        data = CASES.get(name)
        fields = previous_fields_bytes(data) if isinstance(data, dict) else None
        modes = ["jq"] + (["companion", "stale companion"] if fields is not None else [])
        for mode in modes:
            companion.unlink(missing_ok=True)
            if mode != "jq":
                # stale: a companion from an earlier run, older than previous.json (the reader
                # must ignore it); fresh: written after previous.json, as the runner does
                companion.write_bytes(b"write-read\0record\0sstale\0" if mode == "stale companion" else fields)
                t = path.stat().st_mtime_ns
                os.utime(companion, ns=(t, t - 10**9 if mode == "stale companion" else t))
            env = dict(os.environ, AOE_PREVIOUS_EVIDENCE=str(path))
            if mode == "companion":  # a jq that says when it runs
                env["PATH"] = str(tmp_path / "seen-jq") + ":" + env["PATH"]
                (tmp_path / "seen-jq").mkdir(exist_ok=True)
                (tmp_path / "seen-jq" / "jq").write_text(f"#!/bin/sh\necho ran >> {tmp_path}/jq-ran; exec {shutil.which('jq')} \"$@\"\n")
                (tmp_path / "seen-jq" / "jq").chmod(0o755)
            p = subprocess.run(["bash", "-c", script], capture_output=True, timeout=30, env=env)
            together, singly = p.stdout.split(b"|")
            assert together == want and singly == want, (name, mode, want, together, singly)
            if mode == "companion" and not (tmp_path / "jq-ran").exists():
                used_companion += 1
            (tmp_path / "jq-ran").unlink(missing_ok=True)
        if name == "ordinary":
            assert want.split(b"\0")[:3] == [b"r-0a1b", b"v-9f", b"a725d546-8103"]
    # the companion alone served the cases whose asked fields are all strings, numbers jq and
    # Python print alike, true, false or null (the others fall back to jq: "floats", "non-strings")
    assert used_companion == 3, used_companion


STRINGS = ["", "record-0a1b2c", "opaque-9f8e", "a725d546-8103-45bb", "1234:5678", "x y/z+=@,%_.-",
           'say "hi"', "back\\slash", "tab\there", "nl\n", "\x01\x1f\x7f", "é ü 中", "caf\xc3", "'$(id)`x`"]


@pytest.mark.skipif(shutil.which("jq") is None, reason="jq not installed")
def test_json_str_and_evidence_match_jq(tmp_path):
    """json_str (no jq for plain strings) prints what jq prints for every string, and the
    verifiers' evidence objects are byte for byte jq -c's (the expressions they replaced)."""
    for text in STRINGS:
        arg = b"caf\xc3" if text == "caf\xc3" else text.encode()  # invalid UTF-8 too
        out = subprocess.run(["bash", "-c", f'. "{LIB}"; json_str "$1"; printf "|"; jq -cn --arg s "$1" \'$s\'', "-", arg],
                             capture_output=True, timeout=30).stdout
        ours, want = out.split(b"|")
        assert ours.rstrip(b"\n") == want.rstrip(b"\n"), (text, ours, want)  # as "$(json_str ...)" reads it
    # the service-restart object, with and without a boot id, and with an odd value
    jq_expr = ('{record:$r, restart:true, value:$v} + (if $b == "" then {} else {boot_id:$b} end)'
               ' + {main_pid_before:$mb, main_pid_after:$ma, invocation_before:$ib, invocation_after:$ia,'
               ' listener_before:$lb, listener_after:$la}')
    ours_sh = ('ev="{\\"record\\":$(json_str "$r"),\\"restart\\":true,\\"value\\":$(json_str "$v")"; '
               '[[ -z "$b" ]] || ev+=",\\"boot_id\\":$(json_str "$b")"; '
               'ev+=",\\"main_pid_before\\":$(json_str "$mb"),\\"main_pid_after\\":$(json_str "$ma")"; '
               'ev+=",\\"invocation_before\\":$(json_str "$ib"),\\"invocation_after\\":$(json_str "$ia")"; '
               'ev+=",\\"listener_before\\":$(json_str "$lb"),\\"listener_after\\":$(json_str "$la")}"; '
               'printf "%s" "$ev"')
    restart = (LIB.parent / "service-restart.sh").read_text()
    assert ours_sh.split("; printf")[0].replace('"$r"', '"$record"').replace('"$v"', '"$value"') \
        .replace('"$b"', '"$boot_id"').replace('"$mb"', '"$main_before"').replace('"$ma"', '"$main_after"') \
        .replace('"$ib"', '"$inv_before"').replace('"$ia"', '"$inv_after"').replace('"$lb"', '"$listener_before"') \
        .replace('"$la"', '"$listener_after"').replace("; ", "\n") in restart
    for b, v in (("", "opaque-1"), ("a725-d5", 'odd "v"\n')):
        env = {"r": "record-1", "v": v, "b": b, "mb": "12", "ma": "34", "ib": "ab", "ia": "cd", "lb": "5:6", "la": ""}
        ours = subprocess.run(["bash", "-c", f'. "{LIB}"; {ours_sh}'], capture_output=True, timeout=30,
                              env={**env, "AOE_TUI_VERIFY_KIT": os.environ["AOE_TUI_VERIFY_KIT"]}).stdout
        args = [a for k, val in env.items() for a in ("--arg", k, val)]
        want = subprocess.run(["jq", "-cj", "-n", *args, jq_expr], capture_output=True, timeout=30).stdout
        assert ours == want


DJQ_LIB = LIB.parent.parent.parent / "durable-job-queue" / "verify" / "lib.sh"
JOB = '{"id": "j1", "payload": "p q", "status": "completed", "result": "processed:p q", "attempts": 1}'
JOB_BODIES = [
    JOB, JOB.replace(", ", ","), " \r\n" + JOB.replace("\": ", "\"\t:\n ") + "\n", JOB[:-1] + ', "extra": "x", "n": -3}',
    JOB[:-1] + ",}", JOB.replace('"attempts": 1', '"attempts": 1.0'), JOB.replace('"attempts": 1', '"attempts": 2'),
    JOB.replace('"attempts": 1', '"attempts": "1"'), JOB.replace('"attempts": 1', '"attempts": 01'),
    '{"id": "j0", ' + JOB[1:], JOB + '{"a": 1}', JOB + " x", "[" + JOB + "]", JOB.replace('"j1"', '"j\\u0031"'),
    JOB.replace("completed", "done"), JOB.replace('"id": "j1",', '"id": "j1"'), "\f" + JOB, JOB.replace("p q", "p\tq"),
    JOB[:-1] + ', "x": [1]}', "{}", "", "not json",
]


@pytest.mark.skipif(shutil.which("jq") is None, reason="jq not installed")
def test_job_plainly_ok_never_accepts_what_jq_rejects(tmp_path):
    """durable-job-queue's job_plainly_ok (job_problem without jq) accepts only bodies jq finds
    completed exactly once, and accepts the plain ones a service writes."""
    body = tmp_path / "body"
    verdicts = {}
    for text in JOB_BODIES:
        body.write_bytes(text.encode())
        fast = subprocess.run(["bash", "-c", f'. "{DJQ_LIB}"; job_plainly_ok "$1" j1 "p q"', "_", str(body)],
                              capture_output=True, timeout=30).returncode == 0
        jq = subprocess.run(["jq", "-e", "--arg", "id", "j1", "--arg", "p", "p q",
                             'type == "object" and .id == $id and .payload == $p and .status == "completed" and '
                             '.result == ("processed:" + $p) and (.attempts | type) == "number" and .attempts == 1',
                             str(body)], capture_output=True, timeout=30)
        ok = jq.returncode == 0 and jq.stdout.split() == [b"true"]
        assert ok or not fast, text
        verdicts[text] = fast
    assert [t for t, fast in verdicts.items() if fast] == JOB_BODIES[:4]


def test_json_field_reads_a_top_level_field_as_text(tmp_path):
    """The toolkit's json_field: a field of a JSON object as jq -r prints it, empty for
    anything else (not an object, no such field, not JSON, no file)."""
    kit = os.environ["AOE_TUI_VERIFY_KIT"]
    (tmp_path / "job.json").write_text('{"status": "completed", "attempts": 1, "result": {"a": [1]}, "none": null}')
    (tmp_path / "list.json").write_text('[{"status": "x"}]')
    (tmp_path / "bad.json").write_text('{"status": ')
    cases = [("job.json", "status", "completed"), ("job.json", "attempts", "1"), ("job.json", "result", '{"a":[1]}'),
             ("job.json", "none", ""), ("job.json", "missing", ""), ("list.json", "status", ""),
             ("bad.json", "status", ""), ("absent.json", "status", "")]
    for name, key, want in cases:
        out = subprocess.run(["bash", "-c", f'. "{kit}"; printf "[%s]" "$(json_field "$1" "$2")"', "-",
                              str(tmp_path / name), key], capture_output=True, text=True, timeout=30)
        assert out.stdout == f"[{want}]", (name, key, out.stdout, out.stderr)
