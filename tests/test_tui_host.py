"""The TUI's season engine thread (``aoe_tui.tui.host.SeasonHost``) on a stop."""

from __future__ import annotations

import asyncio

import pytest

from aoe_tui.tui.host import SeasonHost


def test_stop_lets_every_engine_task_clean_up_before_the_loop_closes():
    """Ctrl+C in the ``aoe run`` TUI while a heat provisions: the runner's task is
    cancelled, but tasks it spawned (a territory's boot wait under the provisioning) were
    left pending when the engine loop closed; the garbage collector later closed their
    coroutines, whose cleanup (``ready.cancel()``) met the closed loop and printed
    "Exception ignored ... RuntimeError: Event loop is closed" tracebacks on the restored
    terminal. Every task still pending at the end is cancelled and its cleanup runs on
    the open loop."""
    cleaned: list[str] = []

    async def boot_wait():
        inner = asyncio.ensure_future(asyncio.sleep(3600))
        try:
            await asyncio.sleep(3600)
        finally:
            inner.cancel()  # needs the loop open, as ContainerProvider._wait_boot does
            cleaned.append("boot wait")

    class Runner:
        stop_reason = None

        async def run(self):
            self.stray = asyncio.get_running_loop().create_task(boot_wait())
            await asyncio.sleep(3600)

    host = SeasonHost(lambda say: Runner(), priority="normal")
    host.start()
    for _ in range(100):  # the stray task has started
        if getattr(host.runner, "stray", None) is not None:
            break
        host.join(0.01)
    host.stop("SIGINT")
    assert host.join(10)
    assert host.cancelled and host.error is None
    assert cleaned == ["boot wait"]
    assert host.runner.stray.cancelled()


class _Endless:
    """A season run that goes on until cancelled (or, so a failing test still ends, until
    ``release`` is set: at most 30 s)."""

    stop_reason = None
    release = False

    def __init__(self, *_args, **_kwargs):
        self.started = False

    async def run(self):
        self.started = True
        for _ in range(3000):
            if _Endless.release:
                return None
            await asyncio.sleep(0.01)
        return None


def test_a_stop_before_the_run_task_exists_still_stops_the_engine():
    """A signal in the first milliseconds of ``aoe run``'s TUI can call ``stop`` before the
    engine thread has created its run task: that stop was dropped and the season ran on
    unattended. It is kept and the task is cancelled as soon as it exists."""
    host = SeasonHost(lambda say: _Endless(), priority="normal")
    try:
        host.stop("SIGINT")
        host.start()
        assert host.join(10), "the engine thread ran on after a stop"
        assert host.cancelled and host.error is None
        assert host.runner.stop_reason == "SIGINT"
    finally:
        _Endless.release = True
        host.join(40)
        _Endless.release = False


def test_ctrl_c_before_the_view_is_up_stops_the_engine(monkeypatch, tmp_path):
    """``aoe run`` (TUI): a Ctrl+C while the view is being built (before its own signal
    handlers are in place) raised KeyboardInterrupt past the code that stops the engine,
    and the non-daemon engine thread kept the process running the season with no view."""
    import threading

    from aoe_tui.commands import season as season_cmd
    from aoe_tui.season import runner as runner_mod
    from aoe_tui.tui.app import AoeApp

    monkeypatch.setattr(runner_mod, "SeasonRunner", _Endless)

    def interrupted(*_args, **_kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(AoeApp, "season_view", classmethod(interrupted))
    try:
        with pytest.raises(KeyboardInterrupt):
            season_cmd._run_tui(None, tmp_path, False, {}, "normal")
        engines = [t for t in threading.enumerate() if t.name == "aoe-season-engine" and t.is_alive()]
        assert not engines, "the engine thread was left running"
    finally:
        _Endless.release = True
        for t in threading.enumerate():
            if t.name == "aoe-season-engine":
                t.join(40)
        _Endless.release = False


async def test_a_resumable_stop_keeps_the_view_open_and_says_it(tmp_path):
    """Issue #30 item 1, a new user's try: a knockout that starts waiting on a void heat (the
    engine ends with ``SeasonWaiting``, exit 75) no longer closes the live view at once: it
    stays on the season screen and says the stop; ``q`` then quits, and the command reports
    the same line (exit 75). An engine failure still closes the view as ``"error"``."""
    from aoe_tui.season.runner import SeasonWaiting
    from aoe_tui.tui.app import AoeApp
    from aoe_tui.tui.live import LiveFeed
    from aoe_tui.tui.season_screens import SeasonScreen

    line = ("season waiting on heat r1h2 (void): c, e, f; aoe run s.toml --output out --retry-void re-runs it")

    def runner(error):
        class Runner:
            stop_reason = None

            async def run(self):
                raise error
        return lambda say: Runner()

    host = SeasonHost(runner(SeasonWaiting(line, [(1, 2)])), priority="normal")
    host.start()
    assert host.join(10) and isinstance(host.error, SeasonWaiting)
    app = AoeApp.season_view(LiveFeed(), tmp_path, host=host, read_only=False)
    async with app.run_test(size=(120, 40)) as pilot:
        for _ in range(40):
            await pilot.pause(0.05)
            if app._host_reported:
                break
        assert app._host_reported and app.is_running and isinstance(app.screen, SeasonScreen)
        assert any(line in str(n.message) for n in app._notifications), list(app._notifications)
        await pilot.press("q")
        await pilot.pause(0.1)
    assert app.return_value == "finished"

    failed = SeasonHost(runner(RuntimeError("boom")), priority="normal")
    failed.start()
    assert failed.join(10)
    app = AoeApp.season_view(LiveFeed(), tmp_path, host=failed, read_only=False)
    async with app.run_test(size=(120, 40)) as pilot:
        for _ in range(40):
            await pilot.pause(0.05)
            if not app.is_running:
                break
    assert app.return_value == "error"
