"""Issue 27 on real container territories: a live budget and a hostile upstream in one heat.

Real parts throughout (as :mod:`tests.test_opencode_heat`): systemd-nspawn territories, real
SSH, the real opencode binary inside the guests, the credential proxy through the SSH reverse
tunnel, and the scripted model server on the runner (the only stand-in: the model).

* builder-one: opencode against a model that **never stops** (a shell call every turn), with
  ``budget.max_cost_microusd = 2000`` and season prices making each turn cost 600 µUSD. After
  the fourth turn it has spent 2400 µUSD; the proxy refuses the fifth call (402), opencode is
  ended, and the seat's record says ``budget_exceeded: spent 2400 µUSD of 2000 µUSD``. Its
  territory is still checked by the referee.
* builder-two: opencode against a **hostile** upstream that plants the key (the same key the
  proxy injects) in every response header, every JSON body and every stream (split across
  chunks): it still deploys the durable service, and no piece of the key reaches its guest,
  the match folder or any other seat.
* builder-three: ``scripted:volatile``, untouched by either.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets

import pytest

from aoe_tui.domain.arena import load_manifest
from aoe_tui.domain.prices import ModelPrice
from aoe_tui.testing.model_server import ScriptedModelServer, durable_sqlite_script, never_stop_step
from tests.test_opencode_heat import KEY_ENV, KeyCheckingProvider, make_arena, need_host, opencode_bin  # noqa: F401 - fixture

pytestmark = [pytest.mark.container]

#: 0.1 USD/Mtok input, 4 USD/Mtok output: a 2000 + 100 token turn costs 200 + 400 = 600 µUSD.
RATES = ModelPrice(input_per_mtok=0.1, output_per_mtok=4.0).rates()
LIMIT = 2_000


def _pieces(key: str, n: int = 8) -> list[bytes]:
    k = key.encode()
    return [k[i:i + n] for i in range(len(k) - n + 1)]


def _hits(folder, key: str) -> list[str]:
    pieces = _pieces(key)
    out = []
    for p in folder.rglob("*"):
        if p.is_file() and not p.is_symlink():
            try:
                data = p.read_bytes()
            except OSError:
                continue
            if any(x in data for x in pieces):
                out.append(str(p))
    return out


@pytest.fixture(scope="module")
def budget_heat(tmp_path_factory, guest_image, opencode_bin, monkeypatch_module):
    need_host()
    from aoe_tui.agents.opencode import OpencodeAdapter

    # not hex: no 8-character piece of it can turn up by chance in a sha256 in the folder
    key = "sk-aoe-test-" + secrets.token_urlsafe(24)
    monkeypatch_module.setenv(KEY_ENV, key)
    root = tmp_path_factory.mktemp("budget")
    arena_path = make_arena(root / "first-build", duration=180, models=["scripted/endless", "scripted/durable-sqlite",
                                                                        "volatile"])
    text = arena_path.read_text()
    assert "[agents.budget]\nresource_units = 1" in text
    arena_path.write_text(text.replace("[agents.budget]\nresource_units = 1",  # the first agent: builder-one's
                                       f"[agents.budget]\nresource_units = 1\nmax_cost_microusd = {LIMIT}", 1))
    with ScriptedModelServer([never_stop_step(prompt_tokens=2_000, completion_tokens=100)], mode="endless",
                             expect_key=key) as endless, \
            ScriptedModelServer(durable_sqlite_script(step_delay_s=1.0), expect_key=key, plant_key=key) as hostile:
        spender = OpencodeAdapter({"base_url": endless.base_url, "api_key_env": KEY_ENV})
        spender.price = RATES
        builder = OpencodeAdapter({"base_url": hostile.base_url, "api_key_env": KEY_ENV})
        from aoe_tui.agents.registry import resolve_adapter
        from aoe_tui.referee.heat import run_heat
        from aoe_tui.runtime.container import ContainerProvider

        loaded = load_manifest(arena_path)
        seats = {"builder-one": spender, "builder-two": builder, "builder-three": resolve_adapter("scripted:volatile")}
        by_agent = {a.id: seats[a.territory] for a in loaded.manifest.agents}
        out = root / "match"
        provider = KeyCheckingProvider(ContainerProvider(out / "territories", image=guest_image,
                                                         heat_id=f"bx-{os.getpid()}"), key)
        world = asyncio.run(run_heat(loaded, provider, by_agent, out, drain_seconds=5))
        return world, out, provider, endless.requests, endless.sent, hostile.requests, key


@pytest.fixture(scope="module")
def monkeypatch_module():
    mp = pytest.MonkeyPatch()
    yield mp
    mp.undo()


def test_runaway_model_is_refused_past_its_budget_and_recorded(budget_heat):
    world, out, _provider, requests, sent, _hostile, _key = budget_heat
    result = json.loads((out / "agents/builder-one-agent/result.json").read_text())
    assert result["status"] == "budget_exceeded", result
    assert result["summary"].startswith(f"budget exceeded: spent 2400 µUSD of {LIMIT} µUSD"), result
    # exactly four turns with usage reached the provider; the fifth was refused at the proxy
    assert len(sent) == 4
    assert sum(1 for r in requests if r["has_tools"]) == 4
    usage = json.loads((out / "agents/builder-one-agent/usage.json").read_text())["usage"]
    assert usage["input_tokens"] == 8_000 and usage["output_tokens"] == 400 and usage["cost_microusd"] == 2_400
    assert world.agents["builder-one-agent"].failure_source in ("player", None)
    # the seat keeps its territory and the referee went on checking it
    assert not world.territories["builder-one"].milestones["service-up"].passed


def test_other_seats_are_untouched(budget_heat):
    world, out, _provider, _req, _sent, hostile, _key = budget_heat
    two = json.loads((out / "agents/builder-two-agent/result.json").read_text())
    assert two["status"] == "completed", two
    assert world.territories["builder-two"].competitor_state.value == "durable"
    assert hostile and all(r["auth_ok"] for r in hostile)
    three = json.loads((out / "agents/builder-three-agent/result.json").read_text())
    assert three["status"] in ("completed", "failed"), three
    assert world.winner == "builder-two"


def test_planted_key_is_nowhere(budget_heat):
    _world, out, provider, _req, _sent, _hostile, key = budget_heat
    assert _hits(out, key) == []
    assert set(provider.key_hits) == {"builder-one", "builder-two", "builder-three"}
    for tid, hits in provider.key_hits.items():
        assert hits.strip() == "0", f"{tid}: key found in guest: {hits!r}"
