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
