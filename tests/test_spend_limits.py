"""Issue 27: live spend limits (shapes, the season file's ``[budget]``, the runner's wiring) and
``command:`` adapters that see only their own entrant's credentials."""

from __future__ import annotations

import json

import pytest

from aoe_tui.agents.base import AdapterStatus, AgentOutcome
from aoe_tui.agents.command import BUDGET_SUMMARY, CommandAdapter, apply_budget
from aoe_tui.domain.agent_usage import Usage
from aoe_tui.domain.arena import Budget
from aoe_tui.domain.season_file import SeasonFileError, load_season, parse_season_text
from aoe_tui.domain.spend import SpendCap, SpendLedger
from tests.test_adapters import WRITE_RESULT, make_ctx, script
from tests.test_season_results import _season_text


def test_caps_say_the_limit_and_the_amount_spent():
    cap = SpendCap(max_cost_microusd=2_000)
    assert cap.crossed(SpendLedger(cost_microusd=2_000)) is None  # "greater than" (§5.4)
    assert cap.crossed(SpendLedger(cost_microusd=2_150)) == "budget exceeded: spent 2150 µUSD of 2000 µUSD"
    season = SpendCap(max_tokens=100, max_requests=3, scope="season")
    assert season.crossed(SpendLedger(tokens=101)) == "season budget exceeded: used 101 tokens of 100 tokens"
    assert season.crossed(SpendLedger(requests=2)) is None
    assert season.crossed(SpendLedger(requests=3)) == "season budget exceeded: made 3 model requests of 3"
    assert SpendCap().is_empty() and not cap.is_empty()
    led = SpendLedger()
    led.add(cost_microusd=5, tokens=-3, requests=1)
    assert (led.cost_microusd, led.tokens, led.requests) == (5, 0, 1)


def test_a_live_refusal_keeps_its_summary_through_the_after_the_fact_check():
    usage = Usage(resource_units=1, cost_microusd=2_400)
    live = AgentOutcome(AdapterStatus.BUDGET_EXCEEDED, "budget exceeded: spent 2400 µUSD of 2000 µUSD", usage)
    budget = Budget(resource_units=1, max_cost_microusd=2_000)
    assert apply_budget(live, budget) is live
    after = apply_budget(AgentOutcome(AdapterStatus.COMPLETED, "done", usage), budget)
    assert (after.status, after.summary) == (AdapterStatus.BUDGET_EXCEEDED, BUDGET_SUMMARY)


def test_season_budget_table_is_optional_checked_and_one_line_on_error():
    base = _season_text()
    assert parse_season_text(base, "s.toml").budget is None
    b = parse_season_text(base + "[budget]\nheat_max_requests = 40\nseason_max_cost_microusd = 9000\n", "s.toml").budget
    assert b is not None
    assert b.heat_cap(2_000) == SpendCap(2_000, None, 40, "heat")
    assert b.season_cap() == SpendCap(9_000, None, None, "season")
    with pytest.raises(SeasonFileError) as err:
        parse_season_text(base + "[budget]\nseason_max_tokens = 0\nmax_dollars = 3\n", "s.toml")
    text = str(err.value)
    assert "budget.season_max_tokens" in text and "budget.max_dollars" in text and "Traceback" not in text


def test_the_runner_gives_each_entrant_its_limits_and_hides_the_others_keys(tmp_path, monkeypatch):
    from aoe_tui.season.runner import SeasonRunner

    monkeypatch.setenv("KEY_A", "sk-a-0123456789abcdef")
    monkeypatch.setenv("KEY_B", "sk-b-0123456789abcdef")
    text = _season_text(
        "[budget]\nheat_max_tokens = 500000\nseason_max_requests = 10\n"
        + "".join(f'[[entrants]]\nid = "oc{x}"\nadapter = "opencode"\nmodel = "m-{x}"\n'
                  f'[entrants.options]\nbase_url = "http://127.0.0.1:9/v1"\napi_key_env = "KEY_{x.upper()}"\n'
                  for x in ("a", "b")))
    f = tmp_path / "s.toml"
    f.write_text(text)
    runner = SeasonRunner(load_season(f), tmp_path / "out", provider_factory=lambda workdir, heat_id: None)
    a, b, oracle = (runner._make_adapter(runner.entrants[e]) for e in ("oca", "ocb", "e0"))
    assert a.foreign_credentials == {"KEY_B"} and b.foreign_credentials == {"KEY_A"}
    assert oracle.foreign_credentials == {"KEY_A", "KEY_B"}
    assert a.heat_limits == SpendCap(None, 500_000, None, "heat")
    ledger, cap = a.season_spend
    assert cap == SpendCap(None, None, 10, "season") and ledger is runner.spend["oca"]
    again = runner._make_adapter(runner.entrants["oca"])
    assert again.season_spend[0] is ledger  # the same ledger in every heat of the entrant
    assert b.season_spend[0] is not ledger
    agent = type("A", (), {"budget": Budget(resource_units=1, max_cost_microusd=2_000)})()
    assert a.heat_cap(agent) == SpendCap(2_000, 500_000, None, "heat")


async def test_command_adapter_inherits_only_its_own_credentials(tmp_path, monkeypatch):
    monkeypatch.setenv("MY_KEY", "sk-mine-0123456789")
    monkeypatch.setenv("THEIR_KEY", "sk-theirs-0123456789")
    ctx = make_ctx(tmp_path)
    body = ('env | cut -d= -f1 | sort > "$(dirname "$AOE_RESULT_FILE")/names.txt"\n'
            "write_result completed ok '{\"resource_units\":1}'\n")
    adapter = CommandAdapter("tiny", script(tmp_path, WRITE_RESULT + body))
    adapter.foreign_credentials = frozenset({"THEIR_KEY"})
    run = await adapter.start(ctx)
    outcome = await run.wait()
    assert outcome.status == AdapterStatus.COMPLETED, outcome
    names = (ctx.agent_dir / "names.txt").read_text().split()
    assert "MY_KEY" in names and "THEIR_KEY" not in names and "AOE_AGENT_ID" in names
    # nor can it read the other entrant's key from anything it wrote
    for p in ctx.agent_dir.rglob("*"):
        if p.is_file():
            assert b"sk-theirs" not in p.read_bytes(), p
    assert json.loads(ctx.result_file.read_text())["status"] == "completed"


def test_panels_show_spend_against_the_limit():
    """A seat with ``budget.max_cost_microusd`` shows "cost $X / $LIMIT" (panel and scoreboard)."""
    import copy

    from aoe_tui.replay.matchdir import load_match
    from aoe_tui.tui.viewmodel import ArenaView, HeatModel, panel_view
    from aoe_tui.tui.widgets import render_panel, render_scoreboard
    from tests.test_tui_replay import SEED

    seed = load_match(SEED)
    arena = copy.deepcopy(seed.arena)
    for a in arena["agents"]:
        if a["territory"] == "builder-two":
            a.setdefault("budget", {})["max_cost_microusd"] = 2_000_000
    model = HeatModel(ArenaView.from_arena(arena))
    model.extend(seed.records)
    two, one = panel_view(model, "builder-two"), panel_view(model, "builder-one")
    assert two.cost_limit_microusd == 2_000_000 and one.cost_limit_microusd is None
    assert " / $2.0000" in render_panel(two).plain and " / $" not in render_panel(one).plain
    assert "/$2.0000 tok" in render_scoreboard([one, two]).plain


def test_a_resumed_season_ledger_starts_at_what_was_spent(tmp_path):
    """On a resume the runner seeds each entrant's season ledger from the recorded attempts
    (spoiled ones too), so a season cap holds across a restart of the runner."""
    from aoe_tui.domain import season_events as se
    from aoe_tui.replay.season_reducer import reduce_season
    from aoe_tui.season.runner import SeasonRunner
    from tests.test_season_results import _rec

    f = tmp_path / "s.toml"
    f.write_text(_season_text("[budget]\nseason_max_cost_microusd = 5000\n"))
    runner = SeasonRunner(load_season(f), tmp_path / "out", provider_factory=lambda workdir, heat_id: None)

    def stats(cost: int) -> dict:
        return {e: se.EntrantHeatStats(territory="t", rank=1, input_tokens=100, output_tokens=10, cost_microusd=cost)
                for e in ("e0", "e1")}

    evs = [
        se.SeasonStarted(season="s", label="w", arena_id="a", format={"kind": "league"}, entrants=["e0", "e1"],
                         seed=0, heat_size=2, min_heat_size=2, max_attempts=2, season_sha256="0"),
        se.RoundScheduled(round=1, heats=[se.HeatSeats(heat=1, seats=["e0", "e1"])]),
        se.AttemptStarted(round=1, heat=1, attempt=1, folder="round-1/heat-1/attempt-1"),
        se.AttemptFinished(round=1, heat=1, attempt=1, outcome="retry", failure_source="provider", stats=stats(700)),
        se.AttemptStarted(round=1, heat=1, attempt=2, folder="round-1/heat-1/attempt-2"),
        se.AttemptFinished(round=1, heat=1, attempt=2, outcome="counted", ranks={"e0": 1, "e1": 2}, winner="e0",
                           stats=stats(1_300)),
    ]
    runner.state = reduce_season([_rec(i, e) for i, e in enumerate(evs)])
    runner._seed_spend()
    assert (runner.spend["e0"].cost_microusd, runner.spend["e0"].tokens) == (2_000, 220)
    assert runner.season_cap.crossed(runner.spend["e1"]) is None
    runner.spend["e1"].add(cost_microusd=3_001)
    assert runner.season_cap.crossed(runner.spend["e1"]) == "season budget exceeded: spent 5001 µUSD of 5000 µUSD"


def test_season_standings_show_spend_against_the_season_limit():
    from aoe_tui.domain import season_events as se
    from aoe_tui.replay.season_reducer import reduce_season
    from aoe_tui.season.season_standings import season_standings
    from aoe_tui.tui.seasonmodel import STANDINGS_COLUMNS, standings_cells
    from tests.test_season_results import _rec

    def state(limit):
        stats = {e: se.EntrantHeatStats(territory="t", rank=1, input_tokens=100, output_tokens=10, cost_microusd=1_300,
                                        usage_recorded=True) for e in ("e0", "e1")}
        evs = [
            se.SeasonStarted(season="s", label="w", arena_id="a", format={"kind": "league"}, entrants=["e0", "e1"],
                             seed=0, heat_size=2, min_heat_size=2, max_attempts=1, season_sha256="0",
                             cost_limit_microusd=limit),
            se.RoundScheduled(round=1, heats=[se.HeatSeats(heat=1, seats=["e0", "e1"])]),
            se.AttemptStarted(round=1, heat=1, attempt=1, folder="round-1/heat-1/attempt-1"),
            se.AttemptFinished(round=1, heat=1, attempt=1, outcome="counted", ranks={"e0": 1, "e1": 2}, winner="e0",
                               stats=stats),
            se.HeatFinished(round=1, heat=1, attempt=1, ranks={"e0": 1, "e1": 2}, winner="e0"),
        ]
        return reduce_season([_rec(i, e) for i, e in enumerate(evs)])

    cost = STANDINGS_COLUMNS.index("Cost")
    limited = season_standings(state(5_000))
    assert [standings_cells(r)[cost] for r in limited] == ["$0.0013 / $0.0050"] * 2
    assert limited[0].to_dict()["cost_limit_microusd"] == 5_000
    plain = season_standings(state(None))
    assert standings_cells(plain[0])[cost] == "$0.0013" and "cost_limit_microusd" not in plain[0].to_dict()
    # the exported pages too (standings.md / .html); the CSV keeps its columns, the JSON has the limit
    from aoe_tui.export.standings_files import render

    for fmt in ("md", "html"):
        assert render(state(5_000), fmt).count("$0.0013 / $0.0050") == 2, fmt
        assert "/ $0.0050" not in render(state(None), fmt), fmt


async def test_in_a_season_a_command_adapter_inherits_no_credential_its_entrant_did_not_declare(tmp_path, monkeypatch):
    """Issue 27: a ``command:`` adapter in a season gets its own entrant's declared credential
    and none of the runner's other credential-looking variables (another entrant's undeclared
    ``OPENAI_API_KEY``, a ``HF_TOKEN``, AWS keys); the contract's own ``AOE_*`` variables stay."""
    for k, v in {"MY_KEY": "sk-mine-0123456789", "OPENAI_API_KEY": "sk-openai-0123456789",
                 "HF_TOKEN": "hf_0123456789abcdef", "AWS_SECRET_ACCESS_KEY": "aws0123456789abcdef"}.items():
        monkeypatch.setenv(k, v)
    ctx = make_ctx(tmp_path)
    body = ('env | cut -d= -f1 | sort > "$(dirname "$AOE_RESULT_FILE")/names.txt"\n'
            "write_result completed ok '{\"resource_units\":1}'\n")
    adapter = CommandAdapter("tiny", script(tmp_path, WRITE_RESULT + body))
    adapter.own_credentials = frozenset({"MY_KEY"})
    run = await adapter.start(ctx)
    assert (await run.wait()).status == AdapterStatus.COMPLETED
    names = set((ctx.agent_dir / "names.txt").read_text().split())
    assert "MY_KEY" in names and "PATH" in names and "AOE_AGENT_ID" in names and "AOE_RESULT_FILE" in names
    assert not names & {"OPENAI_API_KEY", "HF_TOKEN", "AWS_SECRET_ACCESS_KEY"}, names


def test_the_runner_says_once_which_credentials_a_command_entrant_does_not_inherit(tmp_path, monkeypatch):
    from aoe_tui.season.runner import SeasonRunner

    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai-0123456789")
    monkeypatch.setenv("KEY_A", "sk-a-0123456789abcdef")
    exe = tmp_path / "adapter.sh"
    exe.write_text("#!/bin/sh\nexit 0\n")
    exe.chmod(0o755)
    text = _season_text(
        f'[[entrants]]\nid = "cmd"\nadapter = "command:{exe}"\nmodel = "m"\n'
        f'[[entrants]]\nid = "cmd2"\nadapter = "command:{exe}"\nmodel = "m"\n'
        '[entrants.options]\napi_key_env = "OPENAI_API_KEY"\n')
    f = tmp_path / "s.toml"
    f.write_text(text)
    said: list[str] = []
    runner = SeasonRunner(load_season(f), tmp_path / "out", say=said.append,
                          provider_factory=lambda workdir, heat_id: None)
    for _ in range(2):
        first = runner._make_adapter(runner.entrants["cmd"])
        second = runner._make_adapter(runner.entrants["cmd2"])
    assert first.own_credentials == frozenset() and second.own_credentials == {"OPENAI_API_KEY"}
    notes = [line for line in said if "does not inherit" in line]
    assert len(notes) == 2, said  # once per entrant, not per heat
    assert notes[0].startswith("note: entrant cmd: its adapter's process does not inherit ") and "KEY_A" in notes[0]
    assert "OPENAI_API_KEY" not in notes[0]  # cmd2's declared key: withheld from cmd as foreign, not listed
    assert notes[1].startswith("note: entrant cmd2: its adapter's process does not inherit ") and "KEY_A" in notes[1]
    assert not [line for line in said if "sk-" in line]
