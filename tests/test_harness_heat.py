"""Claude Code and Codex in a real heat on container territories (issue 27 item 1).

Real parts throughout: systemd-nspawn territories, real SSH, the real Claude Code 2.1.332 and
Codex 0.171.0 binaries from npm (installed by ``./setup.sh``) shared read-only into the guests
and staged before the clock, the credential proxy reached through an SSH reverse tunnel. The
model is ``tests/harness_fake.py`` on the runner (Anthropic Messages and OpenAI Responses,
one shell call then an answer), so no internet is needed.

One heat: ``claude-code`` vs ``codex`` vs ``scripted:volatile``. Checked: each harness was
shared (nothing uploaded) and staged before ``match_started``; runs ``--version`` in its guest;
its run completed in the guest (the probe file it was told to write is there); ``usage.json``
holds what the fake server sent; transcript, analysis and activity lines exist; no file in the
match folder and nothing on the guests' disks holds the test key.

The full acceptance (the scripted model server drives each harness to deploy first-build
durably through the proxy) is ``tests/test_harness_acceptance.py``.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import shutil
from pathlib import Path

import pytest

from harness_fake import FakeServer
from test_opencode_heat import KeyCheckingProvider

pytestmark = [pytest.mark.container]

REPO = Path(__file__).resolve().parent.parent
KEY_ENV = "AOE_TEST_HARNESS_KEY"
SEATS = {"builder-one": "claude-code", "builder-two": "codex"}


def need_host() -> None:
    if os.geteuid() != 0:
        pytest.skip("container heats need root")
    if shutil.which("systemd-nspawn") is None:
        pytest.skip("systemd-nspawn not installed (apt-get install systemd-container)")


def need_harnesses() -> None:
    from aoe_tui.agents.registry import harness_adapters

    for cls in harness_adapters():
        if cls.harness.binary() is None:
            pytest.skip(f"{cls.harness.name} {cls.harness.version} is not installed (./setup.sh installs it from npm)")


class CheckingProvider(KeyCheckingProvider):
    """The opencode heat's pass-through provider; before teardown, per harness seat, runs the
    staged binary's ``--version`` in the guest, reads the probe file, lists uploads, and greps
    the disk for the key."""

    def __init__(self, inner, key: str) -> None:
        super().__init__(inner, key)
        self.checks: dict[str, dict[str, str]] = {}

    async def teardown(self):
        from aoe_tui.agents.registry import harness_adapters

        by_name = {cls.harness.name: cls.harness for cls in harness_adapters()}
        for t in self.territories:
            got: dict[str, str] = {}
            try:
                async with self.inner.ssh(t) as conn:
                    h = by_name.get(SEATS.get(t.id, ""))
                    if h is not None:
                        res = await conn.run(f"{h.share_guest()}/{h.binary_name} --version", check=False)
                        got["version"] = str(res.stdout or "") + str(res.stderr or "")
                        res = await conn.run("cat /root/probe.txt", check=False)
                        got["probe"] = str(res.stdout or "")
                        res = await conn.run(f"ls {h.guest_root()}/bin 2>/dev/null", check=False)
                        got["uploaded"] = str(res.stdout or "").strip()
                    res = await conn.run(
                        "grep -rlaF --exclude-dir=proc --exclude-dir=sys --exclude-dir=dev --exclude-dir=aoe-harness "
                        f"-- '{self.key}' / 2>/dev/null | head", check=False)
                    got["key_hits"] = str(res.stdout or "").strip()
            except Exception as exc:  # noqa: BLE001 - recorded, asserted by the test
                got["error"] = str(exc)
            self.checks[t.id] = got
        await self.inner.teardown()



def make_arena(dest: Path, *, duration: int) -> Path:
    shutil.copytree(REPO / "arenas" / "first-build", dest)
    manifest = dest / "arena.toml"
    text = manifest.read_text()
    text = text.replace("duration_seconds = 600", f"duration_seconds = {duration}")
    text = text.replace("recovery_window_seconds = 60", "recovery_window_seconds = 10")
    for model in ("probe-model", "probe-model", "volatile"):
        text = text.replace('model = "oracle"', f'model = "{model}"', 1)
    manifest.write_text(text)
    return manifest


@pytest.fixture(scope="module")
def harness_heat(tmp_path_factory, guest_image):
    need_host()
    need_harnesses()
    from aoe_tui.agents.registry import resolve_adapter
    from aoe_tui.domain.arena import load_manifest
    from aoe_tui.referee.heat import run_heat
    from aoe_tui.runtime.container import ContainerProvider

    key = "sk-aoe-harness-" + secrets.token_hex(16)
    os.environ[KEY_ENV] = key
    root = tmp_path_factory.mktemp("harnessheat")
    with FakeServer("ok") as srv:
        opts = {"base_url": f"http://127.0.0.1:{srv.port}/v1", "api_key_env": KEY_ENV, "idle_timeout_s": 60}
        adapters = {"builder-one": resolve_adapter("claude-code", options=opts),
                    "builder-two": resolve_adapter("codex", options=opts),
                    "builder-three": resolve_adapter("scripted:volatile")}
        loaded = load_manifest(make_arena(root / "first-build", duration=45))
        by_agent = {a.id: adapters[a.territory] for a in loaded.manifest.agents}
        out = root / "match"
        inner = ContainerProvider(out / "territories", image=guest_image, heat_id=f"hh-{os.getpid()}")
        provider = CheckingProvider(inner, key)
        world = asyncio.run(run_heat(loaded, provider, by_agent, out, drain_seconds=5))
        requests = list(srv.requests)
    return world, out, provider, requests, key


def _agent(seat: str) -> str:
    return f"{seat}-agent"


def test_harnesses_are_staged_before_the_clock_and_run_in_the_guest(harness_heat):
    from aoe_tui.agents.registry import harness_adapters

    _world, out, provider, _requests, _key = harness_heat
    versions = {cls.harness.name: cls.harness.version for cls in harness_adapters()}
    extra = json.loads((out / "aoe-extra.json").read_text())
    for seat, name in SEATS.items():
        staging = extra["agents"][_agent(seat)]["staging"]
        assert staging["harness"] == "shared" and staging["uploaded_bytes"] == 0, staging
        assert set(staging["steps_s"]) == {"install", "connect", "harness", "tunnel", "launcher"}, staging
        checks = provider.checks[seat]
        assert versions[name] in checks["version"], checks
        assert checks["uploaded"] == "", checks  # shared read-only, nothing copied


def test_harnesses_complete_and_write_their_artifacts(harness_heat):
    from harness_fake import USAGE

    _world, out, provider, requests, _key = harness_heat
    paths = {p for p, _ in requests}
    assert any(p.startswith("/v1/messages") for p in paths) and "/v1/responses" in paths, paths
    u = USAGE
    expect = {  # two requests each (a tool call, then the answer)
        "builder-one": 2 * (u["input"] + u["cache_write"] + u["cache_read"]),  # Anthropic: counted apart
        "builder-two": 2 * u["input"],  # Responses: cached included
    }
    for seat in SEATS:
        adir = out / "agents" / _agent(seat)
        result = json.loads((adir / "result.json").read_text())
        assert result["status"] == "completed", result
        assert provider.checks[seat]["probe"] == "hello\n", provider.checks[seat]
        usage = json.loads((adir / "usage.json").read_text())["usage"]
        assert usage["input_tokens"] == expect[seat] and usage["output_tokens"] == 2 * u["output"], usage
        assert usage["tool_calls"] == 1 and usage["rounds"] == 2, usage
        transcript = json.loads((adir / "transcript.json").read_text())
        assert transcript["tool_trace"] and "echo hello" in json.dumps(transcript["tool_trace"][0]["input"])
        analysis = json.loads((adir / "analysis.json").read_text())
        assert analysis["actions"], analysis
        assert (adir / "stdout.log").stat().st_size > 0
    activity = (out / "activity.jsonl").read_text() if (out / "activity.jsonl").exists() else ""
    assert "echo hello > probe.txt" in activity


def test_no_key_anywhere(harness_heat):
    _world, out, provider, _requests, key = harness_heat
    needle = key.encode()
    hits = [str(p) for p in out.rglob("*") if p.is_file() and not p.is_symlink() and needle in p.read_bytes()]
    assert hits == []
    for tid, checks in provider.checks.items():
        assert checks.get("key_hits", "ERR") == "", (tid, checks)
