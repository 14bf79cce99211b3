"""first-build's ``verify/lib.sh``: ``previous_fields`` (one jq run for several fields)
gives each field byte for byte what ``previous_field`` (one jq run each) gives, on real
bash and jq, for ordinary, absent, odd and broken evidence files."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

LIB = Path(__file__).resolve().parent.parent / "arenas" / "first-build" / "verify" / "lib.sh"
FIELDS = [("write-read", "record"), ("write-read", "value"), ("service-restart", "boot_id"),
          ("service-restart", "absent"), ("missing-milestone", "record")]
CASES = {
    "ordinary": {"write-read": {"evidence": {"record": "r-0a1b", "value": "v-9f"}},
                 "service-restart": {"evidence": {"boot_id": "a725d546-8103"}}},
    "odd strings": {"write-read": {"evidence": {"record": "it's \"q\" $(x) `y` \\ é\u0001",
                                                "value": "two\nlines\n\n"}},
                    "service-restart": {"evidence": {"boot_id": "", "absent": None}}},
    "non-strings": {"write-read": {"evidence": {"record": 42, "value": {"a": [1, True]}}},
                    "service-restart": {"evidence": {"boot_id": False}}},
    "evidence not an object": {"write-read": {"evidence": "text"}, "service-restart": {"evidence": [1]}},
    "top not an object": [1, 2],
}


@pytest.mark.skipif(shutil.which("jq") is None, reason="jq not installed")
def test_previous_fields_matches_previous_field(tmp_path):
    files = {}
    for i, (name, data) in enumerate(CASES.items()):
        files[name] = tmp_path / f"ev{i}.json"
        files[name].write_text(json.dumps(data))
    files["broken json"] = tmp_path / "broken.json"
    files["broken json"].write_text('{"write-read": {"evidence": {"record": "x"')
    files["no file"] = tmp_path / "absent.json"
    names = " ".join(f"f{i}={m}.{f}" for i, (m, f) in enumerate(FIELDS))
    one = "; ".join(f'printf "%s\\0" "$(previous_field {m} {f})"' for m, f in FIELDS)
    many = f'previous_fields {names}; printf "%s\\0" ' + " ".join(f'"$f{i}"' for i in range(len(FIELDS)))
    for name, path in files.items():
        script = f'. "{LIB}"; AOE_PREVIOUS_EVIDENCE="{path}"; {one}; printf "|"; {many}'
        out = subprocess.run(["bash", "-c", script], capture_output=True, timeout=30).stdout
        singly, together = out.split(b"|")
        assert together == singly, (name, singly, together)
        if name == "ordinary":
            assert singly.split(b"\0")[:3] == [b"r-0a1b", b"v-9f", b"a725d546-8103"]


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
        ours = subprocess.run(["bash", "-c", f'. "{LIB}"; {ours_sh}'], env=env, capture_output=True, timeout=30).stdout
        args = [a for k, val in env.items() for a in ("--arg", k, val)]
        want = subprocess.run(["jq", "-cj", "-n", *args, jq_expr], capture_output=True, timeout=30).stdout
        assert ours == want
