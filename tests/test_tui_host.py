"""The TUI's season engine thread (``aoe_tui.tui.host.SeasonHost``) on a stop."""

from __future__ import annotations

import asyncio

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
