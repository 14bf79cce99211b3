#!/usr/bin/env python3
"""Benchmark: how soon opencode gets going after the race clock starts, beside the oracle (issue 26).

Runs the first-build heat on container territories, in process (``referee/heat.run_heat``),
``--runs`` times (default 2): ``builder-one`` is opencode driven by the scripted model server
(``aoe_tui/testing/model_server.py``: the durable sqlite script), ``builder-two`` the oracle,
``builder-three`` ``scripted:volatile``. For each run it prints, in match-clock ms since
``match_started`` (from ``aoe-extra.json``, ``activity.jsonl`` and ``events.jsonl``):

* opencode's first model request (the credential proxy's first request,
  ``agents[id].first_model_request_ms``) and its first tool call (``first_tool_call_ms``);
* the oracle's first action (its first activity line) and its first milestone passed;
* each seat's staging time before the clock (``timings.staging_s``, s) and how opencode's
  harness got there (``shared``: the read-only share, ``uploaded``: SFTP) and whether it was
  started warm.

``--cold`` runs opencode with ``warm_start = false`` (``opencode run`` started at the clock),
for the before/after comparison. Needs root, systemd-nspawn, the guest image, opencode
(``./setup.sh``) and ripgrep.

Usage: ``.venv/bin/python benchmarks/opencode_start.py [--runs 2] [--cold] [--keep]``
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
KEY_ENV = "AOE_BENCH_MODEL_KEY"


def make_arena(dest: Path) -> Path:
    """first-build with opencode's model on builder-one: a 45 s clock that runs to its end
    (``stop_on_first_durable = false``: the oracle's durable finish must not stop opencode
    before its first request), a short recovery window."""
    shutil.copytree(REPO / "arenas" / "first-build", dest)
    manifest = dest / "arena.toml"
    text = manifest.read_text()
    text = text.replace("duration_seconds = 600", "duration_seconds = 45")
    text = text.replace("stop_on_first_durable = true", "stop_on_first_durable = false")
    text = text.replace("recovery_window_seconds = 60", "recovery_window_seconds = 10")
    text = text.replace('model = "oracle"', 'model = "scripted/durable-sqlite"', 1)
    manifest.write_text(text)
    return manifest


def first_ms(records: list[dict], agent: str) -> int | None:
    return min((r["ms"] for r in records if r.get("agent") == agent), default=None)


def one_run(root: Path, *, warm: bool, index: int) -> dict:
    from aoe_tui.agents.opencode import OpencodeAdapter
    from aoe_tui.agents.registry import resolve_adapter
    from aoe_tui.domain.arena import load_manifest
    from aoe_tui.referee.heat import run_heat
    from aoe_tui.runtime.container import ContainerProvider
    from aoe_tui.runtime.image import ensure_image
    from aoe_tui.testing.model_server import ScriptedModelServer, durable_sqlite_script

    key = "sk-aoe-bench-" + secrets.token_hex(16)
    os.environ[KEY_ENV] = key
    loaded = load_manifest(make_arena(root / "first-build"))
    out = root / "match"
    with ScriptedModelServer(durable_sqlite_script(), expect_key=key) as srv:
        adapters = {
            "builder-one-agent": OpencodeAdapter({"base_url": srv.base_url, "api_key_env": KEY_ENV, "warm_start": warm}),
            "builder-two-agent": resolve_adapter("oracle"),
            "builder-three-agent": resolve_adapter("scripted:volatile"),
        }
        provider = ContainerProvider(out / "territories", image=ensure_image(), heat_id=f"ocb-{os.getpid()}-{index}")
        world = asyncio.run(run_heat(loaded, provider, adapters, out, drain_seconds=3))
    extra = json.loads((out / "aoe-extra.json").read_text())
    activity = [json.loads(x) for x in (out / "activity.jsonl").read_text().splitlines() if x.strip()]
    events = [json.loads(x) for x in (out / "events.jsonl").read_text().splitlines() if x.strip()]
    passed = [e for e in events if e.get("kind") == "milestone_passed" and e.get("territory") == "builder-two"]
    oc = extra["agents"]["builder-one-agent"]
    return {
        "winner": world.winner,
        "first_request_ms": oc.get("first_model_request_ms"),
        "first_tool_ms": oc.get("first_tool_call_ms"),
        "oracle_first_action_ms": first_ms(activity, "builder-two-agent"),
        "oracle_first_milestone_ms": min((e["elapsed_ms"] for e in passed), default=None),
        "staging_s": extra["timings"].get("staging_s", {}),
        "staging_wall_s": extra["timings"].get("staging_wall_s"),
        "opencode_staging": oc.get("staging", {}),
    }


def fmt_ms(ms: int | None) -> str:
    return "n/a" if ms is None else f"{ms} ms"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--cold", action="store_true", help="opencode started cold at the clock (warm_start = false)")
    ap.add_argument("--keep", action="store_true", help="keep the match folders")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="aoe-bench-opencode-"))
    rows = []
    print(f"== opencode ({'cold' if args.cold else 'warm'} start) vs oracle vs scripted:volatile, container, "
          f"{args.runs} run(s); match-clock ms since match_started", flush=True)
    for i in range(args.runs):
        root = tmp / f"run-{i + 1}"
        root.mkdir()
        row = one_run(root, warm=not args.cold, index=i)
        rows.append(row)
        st = row["opencode_staging"]
        seats = "  ".join(f"{a.removesuffix('-agent')}={s:.2f}s" for a, s in row["staging_s"].items())
        print(f"   run {i + 1}: opencode first model request {fmt_ms(row['first_request_ms'])}, first tool call "
              f"{fmt_ms(row['first_tool_ms'])} | oracle first action {fmt_ms(row['oracle_first_action_ms'])}, first "
              f"milestone {fmt_ms(row['oracle_first_milestone_ms'])} | winner {row['winner']}", flush=True)
        print(f"          staging (s, before the clock): {seats}  (wall {row['staging_wall_s']:.2f} s); opencode harness "
              f"{st.get('harness')} ({st.get('uploaded_bytes', 0) // 1_000_000} MB uploaded), warm={st.get('warm_start')}, "
              f"rss {st.get('rss_mib')} MiB, steps {st.get('steps_s')}", flush=True)

    def med(key: str) -> str:
        vals = [r[key] for r in rows if r[key] is not None]
        return f"{statistics.median(vals):.0f} ms" if vals else "n/a"

    print(f"\nmedian: opencode first model request {med('first_request_ms')}, first tool call {med('first_tool_ms')}; "
          f"oracle first action {med('oracle_first_action_ms')}, first milestone {med('oracle_first_milestone_ms')}")
    if args.keep:
        print(f"match folders kept in {tmp}")
    else:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
