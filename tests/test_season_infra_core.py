"""``seasons/infra-core.toml`` end to end: a cup across the five arenas, headless, for real.

Runs the shipped season file through the real CLI (``aoe run --headless``) on container
territories with its own settings (``concurrent_heats = 2``, short clocks), only with the
``scripted:slow`` start delay shortened. Five entrants race five rounds, one arena each;
everyone races every arena once. Then the standings: the oracle is durable on every
arena, the faulty builders nowhere, the per-arena breakdown adds up, and
``aoe standings --format html`` shows it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from arena_support import REPO, need_container_host

pytestmark = [pytest.mark.container]

ARENAS = ["first-build", "durable-job-queue", "zero-downtime-rollout", "primary-failover", "traffic-surge"]
FAULTY = ("hasty", "memory", "volatile")


def test_infra_core_season_runs_to_the_end(tmp_path):
    need_container_host()
    out = tmp_path / "infra-core"
    env = {**os.environ, "AOE_SCRIPTED_SLOW_DELAY_S": "4"}
    res = subprocess.run([sys.executable, "-m", "aoe_tui.cli", "run", str(REPO / "seasons" / "infra-core.toml"),
                          "--headless", "--output", str(out)], capture_output=True, text=True, env=env,
                         timeout=1500, cwd=REPO)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]
    assert "Traceback" not in res.stdout + res.stderr
    data = json.loads((out / "standings.json").read_text())
    assert data["finished"] is True
    assert [a["id"] for a in data["arenas"]] == ARENAS
    by_round: dict[int, set[str]] = {}
    for h in data["heats"]:
        by_round.setdefault(h["round"], set()).add(h["arena"])
        assert not h["void"], h
    assert [sorted(by_round[r]) for r in sorted(by_round)] == [[a] for a in ARENAS]
    rows = {r["entrant"]: r for r in data["standings"]}
    assert set(rows) == {"oracle", "slow", *FAULTY}
    for entrant, row in rows.items():
        assert row["heats"] == 5, (entrant, row)
        assert [row["arenas"][a]["heats"] for a in ARENAS] == [1] * 5, (entrant, row["arenas"])
        total = sum(b["milestone_passes"] for b in row["arenas"].values())
        avail = sum(b["milestones_available"] for b in row["arenas"].values())
        assert avail == 4 + 5 + 5 + 6 + 6 and abs(row["coverage"] - round(total / avail, 4)) < 1e-9
    oracle = rows["oracle"]
    assert oracle["rank"] == 1 and oracle["durable"] == 5 and oracle["wins"] == 5
    assert all(oracle["arenas"][a]["durable"] == 1 and oracle["arenas"][a]["coverage"] == 1.0 for a in ARENAS)
    for name in FAULTY:  # each fails a milestone of every arena: never durable (it may still
        row = rows[name]  # win a heat of faulty builders on points, at the timer)
        assert row["durable"] == 0, row
        assert all(row["arenas"][a]["durable"] == 0
                   and row["arenas"][a]["milestone_passes"] < row["arenas"][a]["milestones_available"]
                   for a in ARENAS), (name, row["arenas"])
    heats_won_by_faulty = [h for h in data["heats"] if h["winner"] in FAULTY]
    assert all(h["attempts"][-1]["outcome"] == "counted" for h in heats_won_by_faulty)
    # the faulty builders' tokens and cost are recorded (made-up but deterministic usage)
    assert rows["hasty"]["cost_microusd"] and rows["hasty"]["arenas"]["traffic-surge"]["cost_microusd"]

    html = subprocess.run([sys.executable, "-m", "aoe_tui.cli", "standings", str(out), "--format", "html"],
                          capture_output=True, text=True, cwd=REPO)
    assert html.returncode == 0
    page = html.stdout
    assert 'id="arena-breakdown"' in page and all(f">{a}<" in page or f"{a}" in page for a in ARENAS)
    md = subprocess.run([sys.executable, "-m", "aoe_tui.cli", "standings", str(out), "--format", "md"],
                        capture_output=True, text=True, cwd=REPO)
    assert md.returncode == 0 and "## Per arena" in md.stdout
    # nothing left running: every territory of every attempt was torn down
    assert not list(out.glob("round-*/heat-*/*/territories/*/state.json"))
