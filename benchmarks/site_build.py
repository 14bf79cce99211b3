#!/usr/bin/env python3
"""Benchmark: the cup site (``aoe site``) of a 100-heat season.

Synthesizes a season folder of ``--heats`` heats (default 100) from the real demo season in
``tests/fixtures/ours/demo-season``: its rounds are replayed over and over (each round's
heats keep their seats, so no entrant races twice in a round), every heat attempt folder is
a copy of the fixture's attempt it repeats (its bundle's name and slug rewritten to the new
round and heat), every tenth heat needs a second attempt (the first spoiled by the
provider, a retry), and ``season.jsonl`` is written through the real ``season.jsonl``
models, so the season reducer accepts it (checked). Then times ``build_season_site`` and
prints the seconds, the page count and the largest page (artifacts apart), and the ratio
to a baseline taken in the same run (reading and reducing every log, copying its files).
Targets: at most 10 s and 500 kB.

Usage: ``.venv/bin/python benchmarks/site_build.py [--heats 100] [--keep DIR] [--strict]``
(``--strict``: exit 1 when a target is missed).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

from aoe_tui.domain import season_events as se
from aoe_tui.replay.season_log import dump_season_record, read_season_log
from aoe_tui.replay.seasondir import load_season_dir

REPO = Path(__file__).resolve().parent.parent
FIXTURE = REPO / "tests" / "fixtures" / "ours" / "demo-season"
MAX_SECONDS = 10.0
MAX_PAGE_BYTES = 500_000
#: every RETRY_EVERY-th heat has a spoiled first attempt and a second one
RETRY_EVERY = 10


def synthesize(out: Path, heats: int) -> Path:
    """Write a season folder of ``heats`` heats into ``out``; returns it."""
    src = read_season_log(FIXTURE / "season.jsonl")
    started = src[0].event
    assert isinstance(started, se.SeasonStarted)
    rounds = [e.event for e in src if e.event.kind == "round_scheduled"]
    finished = {(e.event.round, e.event.heat, e.event.attempt): e.event for e in src if e.event.kind == "attempt_finished"}
    champions = next(e.event.champions for e in src if e.event.kind == "season_finished")
    out.mkdir(parents=True)
    for f in ("season.toml", "season-rules.json"):
        shutil.copyfile(FIXTURE / f, out / f)
    info = started.model_copy(update={"season": "bench", "label": "w100"})
    events: list[se._Ev] = [info]
    made = 0
    rnd = 0
    while made < heats:
        template = rounds[rnd % len(rounds)]
        rnd += 1
        seats = template.heats[: heats - made]
        events.append(se.RoundScheduled(round=rnd, heats=[se.HeatSeats(heat=i + 1, seats=list(h.seats))
                                                           for i, h in enumerate(seats)],
                                        arena=template.arena))
        for i, h in enumerate(seats):
            heat = i + 1
            made += 1
            tmpl = finished[(template.round, h.heat, 1)]
            tdir = FIXTURE / f"round-{template.round}" / f"heat-{h.heat}" / "attempt-1"
            attempts = 2 if made % RETRY_EVERY == 0 else 1
            for a in range(1, attempts + 1):
                folder = f"round-{rnd}/heat-{heat}/attempt-{a}"
                bundle = _copy_attempt(tdir, out / folder, f"season-bench-w100-r{rnd}-h{heat}-a{a}",
                                       f"bench · w100 · round {rnd} heat {heat} · attempt {a}")
                events.append(se.AttemptStarted(round=rnd, heat=heat, attempt=a, folder=folder))
                if a < attempts:  # spoiled by the provider: the heat runs again
                    events.append(tmpl.model_copy(update={
                        "round": rnd, "heat": heat, "attempt": a, "outcome": "retry", "failure_source": "provider",
                        "detail": "provisioning failed: territory builder-one did not boot in 90 s",
                        "winner": None, "ranks": {}, "bundle": f"{folder}/{bundle}"}))
                else:
                    events.append(tmpl.model_copy(update={"round": rnd, "heat": heat, "attempt": a,
                                                          "bundle": f"{folder}/{bundle}"}))
            events.append(se.HeatFinished(round=rnd, heat=heat, attempt=attempts, ranks=dict(tmpl.ranks),
                                          winner=tmpl.winner))
        events.append(se.RoundFinished(round=rnd))
    events.append(se.SeasonFinished(champions=list(champions), rounds=rnd))
    t0 = src[0].time_unix_ms
    lines = [dump_season_record(se.SeasonRecord(sequence=i, time_unix_ms=t0 + 1000 * i, season_clock_ms=1000 * i,
                                                event=ev)) for i, ev in enumerate(events)]
    (out / "season.jsonl").write_text("".join(x + "\n" for x in lines), encoding="utf-8")
    state = load_season_dir(out)  # the season reducer accepts it
    assert len(state.finished_heats()) == heats and state.finished is not None
    return out


def _copy_attempt(src: Path, dst: Path, slug: str, name: str) -> str:
    """Copy the attempt folder ``src`` to ``dst`` with its bundle renamed ``SLUG.match.json``
    (``match.slug`` and ``match.name`` rewritten); returns the bundle's file name."""
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("*.match.json"))
    bundle = next(src.glob("*.match.json"))
    data = json.loads(bundle.read_text(encoding="utf-8"))
    data["match"]["slug"], data["match"]["name"] = slug, name
    (dst / f"{slug}.match.json").write_text(json.dumps(data, ensure_ascii=False, indent=2, sort_keys=True),
                                            encoding="utf-8")
    return f"{slug}.match.json"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--heats", type=int, default=100)
    ap.add_argument("--keep", type=Path, help="write the season and its site here (a new folder) and keep them")
    ap.add_argument("--strict", action="store_true", help="exit 1 when a target is missed")
    args = ap.parse_args()
    from aoe_tui.export.site import build_season_site

    work = args.keep or Path(tempfile.mkdtemp(prefix="aoe-site-bench-"))
    try:
        t0 = time.perf_counter()
        season = synthesize(work / "season", args.heats)
        attempts = sum(1 for _ in season.glob("round-*/heat-*/attempt-*"))
        print(f"season: {args.heats} heats, {attempts} heat attempts ({time.perf_counter() - t0:.1f} s to synthesize)")
        site = work / "site"
        # baseline, the same run: what any site of this season must do at least — read and
        # reduce every attempt's event log (load_match) and copy its files once
        from aoe_tui.replay.matchdir import load_match

        t0 = time.perf_counter()
        for folder in sorted(season.glob("round-*/heat-*/attempt-*")):
            load_match(folder)
            for f in folder.iterdir():
                if f.is_file():
                    (work / "copy").write_bytes(f.read_bytes())
        baseline = time.perf_counter() - t0
        t0 = time.perf_counter()
        summary = build_season_site(season, site)
        seconds = time.perf_counter() - t0
        pages = [p for p in site.rglob("*.html") if "artifacts" not in p.relative_to(site).parts]
        largest = max(pages, key=lambda p: p.stat().st_size)
        size = largest.stat().st_size
        total = sum(p.stat().st_size for p in site.rglob("*") if p.is_file())
        ok_time, ok_size = seconds <= MAX_SECONDS, size <= MAX_PAGE_BYTES
        print(f"build_season_site: {seconds:6.2f} s  (target <= {MAX_SECONDS:.0f} s) {'OK' if ok_time else 'OVER'}"
              f"  [SiteSummary.seconds {summary.seconds:.2f}]")
        print(f"baseline (read + reduce every log, copy its files): {baseline:6.2f} s; "
              f"site / baseline = {seconds / baseline:.1f}x")
        print(f"pages: {len(pages)} ({len(summary.pages)} in the summary), site {total / 1e6:.1f} MB in all")
        print(f"largest page: {size / 1000:6.1f} kB {largest.relative_to(site)}  (target <= {MAX_PAGE_BYTES // 1000} kB) "
              f"{'OK' if ok_size else 'OVER'}")
        if args.keep:
            print(f"kept: {work}")
        return 0 if (ok_time and ok_size) or not args.strict else 1
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
