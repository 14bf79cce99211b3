"""Issue #18 items 6 and 7 without territories: the price arithmetic (integer µUSD per
million tokens), the season file's ``[prices]`` table, cache tokens kept apart from the
upstream usage files, the field diff of a refused resume, ``heats_reopened`` in the
season reducer and the standings' new columns. The real seasons are in
``tests/test_season_container.py``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from aoe_tui.domain.prices import ModelPrice, cost_microusd, microusd_per_mtok
from aoe_tui.domain.season_file import SeasonFileError, changed_fields, load_season

REPO = Path(__file__).resolve().parent.parent
ARENA = REPO / "arenas" / "first-build" / "arena.toml"


def _season_text(extra: str = "", max_attempts: int = 1, models: tuple[str, str] = ("m-a", "m-b")) -> str:
    return (f'id = "s"\nlabel = "w1"\narena = "{ARENA}"\nmax_attempts = {max_attempts}\n'
            '[arena_overrides]\nminimum_territories = 2\n[format]\nkind = "league"\nheats_per_entrant = 1\n'
            + "".join(f'[[entrants]]\nid = "e{i}"\nadapter = "oracle"\nmodel = "{m}"\n' for i, m in enumerate(models))
            + extra)


# ----------------------------------------------------------------------------- prices


def test_price_arithmetic_is_integer_microusd_per_million_tokens():
    assert microusd_per_mtok(0.6) == 600_000 and microusd_per_mtok(0.3) == 300_000
    assert microusd_per_mtok(2.5) == 2_500_000 and microusd_per_mtok(0) == 0
    # one rounding of the exact sum, half up
    assert cost_microusd((1, 500_000)) == 1 and cost_microusd((1, 499_999)) == 0
    assert cost_microusd((1, 300_000), (1, 300_000)) == 1  # 0.3 + 0.3 µUSD -> 0.6 -> 1 (not 0 + 0)
    assert cost_microusd((1_000_000, 600_000)) == 600_000
    assert cost_microusd((-5, 600_000)) == 0
    # the scenario: 360,000 input tokens, 300,000 of them cache reads and 10,000
    # cache writes, 20,000 output; priced per million tokens
    rates = ModelPrice(input_per_mtok=0.60, output_per_mtok=2.50, cache_read_per_mtok=0.15,
                       cache_write_per_mtok=0.75).rates()
    assert (rates.input, rates.output, rates.cache_read, rates.cache_write) == (600_000, 2_500_000, 150_000, 750_000)
    cost = rates.cost(50_000, 20_000, 300_000, 10_000)
    assert cost == (50_000 * 600_000 + 20_000 * 2_500_000 + 300_000 * 150_000 + 10_000 * 750_000) // 1_000_000
    assert cost == 132_500 and isinstance(cost, int)
    # without a cache price, cache tokens cost the input price
    plain = ModelPrice(input_per_mtok=1, output_per_mtok=4).rates()
    assert plain.cost(0, 0, 1_000_000, 1_000_000) == 2_000_000


def test_season_file_price_table(tmp_path):
    f = tmp_path / "s.toml"
    f.write_text(_season_text('[prices."m-a"]\ninput_per_mtok = 0.6\noutput_per_mtok = 2.5\n'
                              'cache_read_per_mtok = 0.15\ncache_write_per_mtok = 0.75\n'))
    s = load_season(f).season
    assert s.prices["m-a"].rates().cache_read == 150_000 and "m-b" not in s.prices
    # an unknown key (the cost_cache_read_per_mtok) names its line and field
    f.write_text(_season_text('[prices."m-a"]\ninput_per_mtok = 0.6\noutput_per_mtok = 2.5\n'
                              'cost_cache_read_per_mtok = 0.1\n'))
    with pytest.raises(SeasonFileError, match=r"s\.toml:\d+: prices\.m-a\.cost_cache_read_per_mtok"):
        load_season(f)
    # a price for a model nobody races is a typo
    f.write_text(_season_text('[prices."m-c"]\ninput_per_mtok = 0.6\noutput_per_mtok = 2.5\n'))
    with pytest.raises(SeasonFileError, match="no entrant races model 'm-c'"):
        load_season(f)
    f.write_text(_season_text('[prices."m-a"]\ninput_per_mtok = -1\noutput_per_mtok = 2.5\n'))
    with pytest.raises(SeasonFileError, match="input_per_mtok"):
        load_season(f)
    # a price written as a string is one line naming the field (whole numbers are prices too)
    f.write_text(_season_text('[prices."m-a"]\ninput_per_mtok = "1.0"\noutput_per_mtok = 3\n'))
    with pytest.raises(SeasonFileError) as ei:
        load_season(f)
    assert [line.split(": ", 1)[1] for line in str(ei.value).splitlines()] == [
        "prices.m-a.input_per_mtok: Input should be a valid number (got '1.0')"]


def test_opencode_cup_documents_example_prices():
    text = (REPO / "seasons" / "opencode-cup.toml").read_text()
    cup = load_season(REPO / "seasons" / "opencode-cup.toml").season
    assert "example" in text.lower()
    assert set(cup.prices) == {e.model for e in cup.entrants}
    assert all(p.cache_read_per_mtok is not None for p in cup.prices.values())


def test_cache_tokens_stay_out_of_upstream_usage_files(tmp_path):
    from aoe_tui.domain.adapter_io import read_usage_checkpoint, write_usage_file
    from aoe_tui.domain.agent_usage import Usage

    u = Usage(input_tokens=360_000, output_tokens=20_000, cost_microusd=48_000, resource_units=1,
              cache_read_tokens=300_000, cache_write_tokens=10_000)
    write_usage_file(tmp_path / "usage.json", agent="a", territory="t", usage=u)
    data = json.loads((tmp_path / "usage.json").read_text())
    assert data["usage"] == {"input_tokens": 360_000, "output_tokens": 20_000, "cost_microusd": 48_000,
                             "resource_units": 1}
    back = read_usage_checkpoint(tmp_path / "usage.json", "a", "t")
    assert back.input_tokens == 360_000 and back.cache_read_tokens is None


def test_opencode_usage_prices_cache_and_reports_both_counts(tmp_path):
    from test_opencode_units import _run_for_events

    from aoe_tui.agents.proxy import ProxyStats

    run = _run_for_events(tmp_path)
    t = 1_000_000
    run.on_event({"type": "step_start", "timestamp": t, "part": {}})
    run.on_event({"type": "step_finish", "timestamp": t + 60, "part": {"reason": "stop", "cost": 0.048, "tokens": {
        "input": 50_000, "output": 19_000, "reasoning": 1_000, "cache": {"read": 300_000, "write": 10_000}}}})
    u = run.usage()
    # opencode's own figure when the season gives no price
    assert (u.input_tokens, u.output_tokens, u.cost_microusd) == (360_000, 20_000, 48_000)
    assert (u.cache_read_tokens, u.cache_write_tokens) == (300_000, 10_000)
    assert run.usage_detail()["cost_source"] == "adapter"
    run.adapter.price = ModelPrice(input_per_mtok=0.60, output_per_mtok=2.50, cache_read_per_mtok=0.15,
                                   cache_write_per_mtok=0.75).rates()
    assert run.usage().cost_microusd == 132_500
    d = run.usage_detail()
    assert d["cost_source"] == "price table" and d["adapter_cost_microusd"] == 48_000
    assert (d["cache_read_tokens"], d["events_input_tokens"], d["events_output_tokens"]) == (300_000, 360_000, 20_000)
    assert "proxy_input_tokens" not in d
    run.proxy_stats = ProxyStats()
    run.proxy_stats.add_usage({"prompt_tokens": 361_000, "completion_tokens": 20_000})
    d = run.usage_detail()
    assert (d["proxy_input_tokens"], d["proxy_output_tokens"]) == (361_000, 20_000)
    from aoe_tui.season.attempts import usage_mismatches

    assert list(usage_mismatches({"a1": d})) == ["a1"]
    assert usage_mismatches({"a1": {**d, "proxy_input_tokens": 360_000}}) == {}
    assert not any("key" in k for k in d)  # never a credential


# ----------------------------------------------------------------------------- refusals


def test_changed_fields_names_what_differs():
    old = _season_text(max_attempts=1)
    assert changed_fields(old, old + "# a comment\n") == []
    assert changed_fields(old, _season_text(max_attempts=3)) == ["max_attempts"]
    assert changed_fields(old, _season_text(max_attempts=3, models=("m-a", "m-z"))) == [
        "entrants[1].model", "max_attempts"]
    assert changed_fields(old, old + '[prices."m-a"]\ninput_per_mtok = 1\noutput_per_mtok = 2\n') == [
        "prices.m-a.input_per_mtok", "prices.m-a.output_per_mtok"]


def test_resume_refusal_names_the_changed_fields(tmp_path):
    from aoe_tui.season.runner import SeasonMismatchError, SeasonRunner

    f = tmp_path / "s.toml"
    f.write_text(_season_text(max_attempts=1))
    out = tmp_path / "out"
    out.mkdir()
    (out / "season.toml").write_text(_season_text(max_attempts=1))
    (out / "season.jsonl").write_text("")  # empty log: a fresh start, the copy is rewritten
    f.write_text(_season_text(max_attempts=3))
    runner = SeasonRunner(load_season(f), out)
    runner._open()
    runner.log.close()
    assert (out / "season.toml").read_text() == _season_text(max_attempts=3)
    (out / "season.toml").write_text(_season_text(max_attempts=1))  # now a season with a log
    f.write_text(_season_text(max_attempts=3, models=("m-a", "m-z")))
    with pytest.raises(SeasonMismatchError) as err:
        SeasonRunner(load_season(f), out)._open()
    assert err.value.fields == ["entrants[1].model", "max_attempts"]
    assert "fields that differ: entrants[1].model, max_attempts" in str(err.value)
    f.write_text(_season_text(max_attempts=3))
    with pytest.raises(SeasonMismatchError, match="fields that differ: max_attempts.*aoe run --retry-void"):
        SeasonRunner(load_season(f), out)._open()
    # --retry-void accepts a new max_attempts, and only that
    r = SeasonRunner(load_season(f), out, retry_void=True)
    r._open()
    r._reopen_void()  # nothing is void: the folder keeps its season.toml, a plain resume still works
    r.log.close()
    assert (out / "season.toml").read_text() == _season_text(max_attempts=1)
    f.write_text(_season_text(max_attempts=3, models=("m-a", "m-z")))
    with pytest.raises(SeasonMismatchError, match="entrants\\[1\\].model.*--retry-void allows a new max_attempts only: "
                       "put entrants\\[1\\].model back as the folder's season.toml has it, or choose"):
        SeasonRunner(load_season(f), out, retry_void=True)._open()


# ----------------------------------------------------------------------------- reducer


class _Ent:
    def __init__(self, adapter: str) -> None:
        self.adapter = adapter


def _rec(seq: int, ev) -> object:
    from aoe_tui.domain import season_events as se

    return se.SeasonRecord(sequence=seq, time_unix_ms=seq, event=ev)


def test_heats_reopened_opens_only_void_heats_and_counts_attempts_on():
    from aoe_tui.domain import season_events as se
    from aoe_tui.replay.season_reducer import SeasonStateError, reduce_season
    from aoe_tui.season.season_standings import season_standings

    evs = [
        se.SeasonStarted(season="s", label="w", arena_id="a", format={"kind": "league"}, entrants=["x", "y"],
                         seed=0, heat_size=2, min_heat_size=2, max_attempts=1, season_sha256="0"),
        se.RoundScheduled(round=1, heats=[se.HeatSeats(heat=1, seats=["x", "y"])]),
        se.AttemptStarted(round=1, heat=1, attempt=1, folder="round-1/heat-1/attempt-1"),
        se.AttemptFinished(round=1, heat=1, attempt=1, outcome="void", failure_source="provider",
                           adapter_failures={"y": "provider"}),
        se.HeatFinished(round=1, heat=1, attempt=None, void=True, ranks={"x": 1, "y": 1}),
        se.RoundFinished(round=1),
        se.SeasonFinished(champions=["x", "y"], rounds=1),
    ]
    records = [_rec(i, e) for i, e in enumerate(evs)]
    state = reduce_season(records)
    from aoe_tui.domain.display import summarize_season_event
    from aoe_tui.season.runner import adapters_that_always_failed

    failed = adapters_that_always_failed(state, {"x": _Ent("oracle"), "y": _Ent("opencode")})
    assert failed == {"y": "adapter opencode, 1/1 attempts: provider"}
    done = se.SeasonFinished(champions=["x", "y"], rounds=1, adapters_failed=failed)
    assert summarize_season_event(done) == ("season finished: champion x, y; adapter failed every attempt: "
                                            "y (adapter opencode, 1/1 attempts: provider)")
    assert [r.infra_failures for r in season_standings(state)] == [1, 1]
    reopen = se.HeatsReopened(heats=[(1, 1)], max_attempts=2, season_sha256="1")
    state = reduce_season(records + [_rec(7, reopen)])
    heat = state.rounds[1].heats[1]
    assert heat.result is None and heat.attempt_base == 1 and heat.next_attempt_number() == 2
    assert state.finished is None and state.rounds[1].finished is None and state.max_attempts == 2
    assert state.pending_heats() == [heat] and state.finish_order == []
    more = [se.AttemptStarted(round=1, heat=1, attempt=2, folder="round-1/heat-1/attempt-2"),
            se.AttemptFinished(round=1, heat=1, attempt=2, outcome="counted", ranks={"x": 1, "y": 2}, winner="x"),
            se.HeatFinished(round=1, heat=1, attempt=2, ranks={"x": 1, "y": 2}, winner="x"),
            se.RoundFinished(round=1), se.SeasonFinished(champions=["x"], rounds=1)]
    state = reduce_season(records + [_rec(7, reopen)] + [_rec(8 + i, e) for i, e in enumerate(more)])
    assert state.finished.champions == ["x"] and not state.rounds[1].heats[1].result.void
    rows = {r.entrant: r for r in season_standings(state)}
    assert rows["x"].wins == 1 and rows["x"].infra_failures == rows["y"].infra_failures == 1
    # a counted heat cannot be reopened
    with pytest.raises(SeasonStateError, match="not a void heat"):
        reduce_season(records + [_rec(7, reopen)] + [_rec(8 + i, e) for i, e in enumerate(more)] + [_rec(13, reopen)])


def test_proxy_and_event_counts_that_disagree_are_said_once_per_heat(tmp_path):
    from aoe_tui.replay.season_reducer import HeatState
    from aoe_tui.season.runner import SeasonRunner

    f = tmp_path / "s.toml"
    f.write_text(_season_text())
    lines: list[str] = []
    runner = SeasonRunner(load_season(f), tmp_path / "out", say=lines.append)
    agree = {"events_input_tokens": 360_000, "events_output_tokens": 20_000,
             "proxy_input_tokens": 360_000, "proxy_output_tokens": 20_000}
    differ = {**agree, "proxy_input_tokens": 361_500}
    heat, other = HeatState(1, 1, ("e0", "e1")), HeatState(1, 2, ("e0", "e1"))
    runner._say_mismatch(heat, {"e0": agree, "e1": {"cache_read_tokens": 5}}, "r1h1a1")
    assert lines == []
    runner._say_mismatch(heat, {"e0": differ}, "r1h1a1")
    runner._say_mismatch(heat, {"e0": differ}, "r1h1a2")  # the same heat again: not repeated
    runner._say_mismatch(other, {"e1": differ}, "r1h2a1")
    said = "token counts disagree (the larger is charged)"
    assert lines == [f"r1h1a1: {said}: e0: proxy 361500 in / 20000 out, events 360000 in / 20000 out (tokens)",
                     f"r1h2a1: {said}: e1: proxy 361500 in / 20000 out, events 360000 in / 20000 out (tokens)"]


async def test_a_season_whose_heats_all_went_void_crowns_nobody_and_says_how_to_rerun(tmp_path):
    """Every attempt spoiled by the infrastructure (territories that never boot): the season
    ends with no champion (nobody has a counted heat) and names the void heats with the
    ``--retry-void`` hint. Real heat runner and season log; only the provider fails."""
    from aoe_tui.domain.season_events import SeasonFinished
    from aoe_tui.replay.season_log import read_season_log
    from aoe_tui.runtime.provider import ProvisionError, TerritoryProvider
    from aoe_tui.season.runner import SeasonRunner

    class NeverBoots(TerritoryProvider):
        name = "never"

        async def provision(self, specs):
            raise ProvisionError("injected: no territory boots")

        async def reboot(self, territory):
            raise NotImplementedError

        async def teardown(self):
            return None

    f = tmp_path / "void.toml"
    f.write_text(_season_text(max_attempts=2))
    lines: list[str] = []
    runner = SeasonRunner(load_season(f), tmp_path / "out", say=lines.append,
                          provider_factory=lambda workdir, heat_id: NeverBoots())
    state = await runner.run()
    assert [h.result.void for h in state.heats()] == [True]
    finished = [r.event for r in read_season_log(tmp_path / "out" / "season.jsonl")
                if isinstance(r.event, SeasonFinished)]
    assert finished and finished[0].champions == []
    assert "season finished: champion none" in lines
    assert ("1 void heat(s) (the infrastructure spoiled every attempt): r1h1; "
            f"aoe run {f} --output {tmp_path / 'out'} --retry-void re-runs them") in lines


async def test_a_season_refuses_a_match_folder_as_its_output(tmp_path):
    from aoe_tui.errors import AoeError
    from aoe_tui.season.runner import SeasonRunner

    f = tmp_path / "s.toml"
    f.write_text(_season_text())
    out = tmp_path / "m1"
    out.mkdir()
    (out / "events.jsonl").write_text("")
    (out / "world.json").write_text("{}")
    with pytest.raises(AoeError, match=r"m1: is a match folder \(events\.jsonl, world\.json\), not a season folder"):
        await SeasonRunner(load_season(f), out).run()
    assert sorted(p.name for p in out.iterdir()) == ["events.jsonl", "world.json"]
