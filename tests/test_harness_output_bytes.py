"""Issue 30 item 9 through the harness runner (claude-code, codex): arbitrary bytes on the
CLI's stdout and stderr (invalid UTF-8, NUL, terminal control sequences, lines past 64 KiB)
and an answer whose JSON text holds lone surrogate escapes and controls never turn the
recorded completed run into a failure, and every file the runner writes is valid UTF-8 JSON.

The recorded streams (``tests/fixtures/harnesses``, see ``test_harness_units``) are replayed
through :meth:`HarnessRun.follow` and :meth:`HarnessRun._finish` as there."""

from __future__ import annotations

import asyncio
import json
import shutil
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aoe_tui.agents.base import AdapterStatus

from test_harness_units import _Conn, _Proc, _adapter, _run, lines

DONE = "Done: probe.txt holds hello."
NASTY = [b"\xff", b"\xfe\xfd", b"\xc3", b"\xed\xa0\x80", b"\x00", b"\x1b[2J\x1b[31m", b"\x1b]0;t\x07",
         b"\r", b"\xc2\x9b", b"\xe2\x80\xae", b"\\ud800", b'{"type":"x","t":"\\udfff"}', b"{", b"x" * 70_000]
garbage = st.lists(st.one_of(st.sampled_from(NASTY), st.binary(max_size=40).map(lambda b: b.replace(b"\n", b""))),
                   max_size=6).map(b"".join)
answers = st.text(st.characters(exclude_categories=()), max_size=30) | st.sampled_from(
    ["\ud800", "a\udfffb", "\x00\x1b[31mred", "\ud83d", "ok"])


def utf8_text(text: str) -> str:
    """``text`` with each lone surrogate as U+FFFD (what a valid UTF-8 file can hold)."""
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


class _RawProc(_Proc):
    """:class:`_Proc` whose stdout lines are bytes as given (not UTF-8 encoded text)."""

    def __init__(self, out: list[bytes], stderr: bytes) -> None:
        super().__init__([], stderr=stderr)
        self.stdout.data = [x + b"\n" for x in out]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(["claude-code", "codex"]), before=garbage, between=garbage, stderr=garbage,
       answer=answers)
def test_harness_bytes_never_fail_a_completed_run(name, before, between, stderr, answer):
    tmp = Path(tempfile.mkdtemp(prefix="aoe-hbytes-"))
    try:
        text = json.dumps(DONE + answer)[1:-1]  # the answer as the CLI escapes it in its JSON
        out = [ln.replace(DONE, text).encode() for ln in lines(f"{name}-ok")]
        out = [before] + out[:2] + [between] + out[2:]
        run = _run(tmp, _adapter(name))
        proc = _RawProc(out, stderr)
        status, summary = asyncio.run(run.follow(_Conn(proc), proc))
        assert status == AdapterStatus.COMPLETED, (status, summary)
        want = utf8_text(" ".join((DONE + answer).split()))  # the runner's one-line summary
        assert utf8_text(summary) == want
        run._finish(status, summary)
        for p in sorted(tmp.iterdir()):
            if p.suffix == ".json":
                doc = json.loads(p.read_bytes().decode("utf-8"))  # raises on invalid UTF-8
                if p.name == "result.json":
                    assert doc["status"] == "completed" and doc["summary"] == want
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
