"""A spectator arriving while the server is still warming up (issue 30).

The zygote (the warm process spectators are forked from) takes a second or more to import
the app; a spectator who connects meanwhile waits for it. Its view was then forked at the
same moment as the spare view, and the two drew their first screens at once on the one
spectator CPU, so the early spectator waited for both. The spare now starts only once the
newcomers' views have drawn their first screen.

Real server, real zygote, real OpenSSH client. The zygote is held back deterministically:
the spectator command is ``python -m`` a module that sleeps 3 s when the zygote preloads it
(not when a forked spectator runs it as ``__main__``), so the client surely connects first.
"""

from __future__ import annotations

import os
import select
import subprocess
import sys
import time
from pathlib import Path

import asyncssh

from aoe_tui.serve.server import ServeConfig, ServerThread
from aoe_tui.testing.feeder import SeasonFeeder

REPO = Path(__file__).resolve().parent.parent
SEED = REPO / "tests" / "fixtures" / "seed" / "opencode-cup-2026-W37-r1-h2-a1.match.json"

SLOW_MODULE = '''
import sys
import time

if __name__ != "__main__":  # the zygote's preload: a slow warm-up
    time.sleep(3.0)
else:
    from aoe_tui.cli import main
    sys.exit(main())
'''


def test_an_early_spectator_does_not_share_the_cpu_with_the_spare(tmp_path, monkeypatch):
    (tmp_path / "mods").mkdir()
    (tmp_path / "mods" / "aoe_slow_spectator.py").write_text(SLOW_MODULE)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path / "mods"), str(REPO)]))
    key = asyncssh.generate_private_key("ssh-ed25519")
    key.write_private_key(str(tmp_path / "id"))
    (tmp_path / "id").chmod(0o600)
    (tmp_path / "authorized_keys").write_bytes(key.export_public_key())
    feeder = SeasonFeeder(SEED, tmp_path / "season", speed=1000.0)
    feeder.prepare()
    feeder.run()
    argv = [sys.executable, "-m", "aoe_slow_spectator", "watch", str(feeder.out)]
    t = ServerThread(ServeConfig(season_dir=feeder.out, host_key=tmp_path / "host_key",
                                 authorized_keys=tmp_path / "authorized_keys", port=0, spectator_argv=argv))
    srv = t.start()
    proc = None
    try:
        proc = subprocess.Popen(
            ["ssh", "-tt", "-p", str(srv.port), "-i", str(tmp_path / "id"), "-o", "IdentitiesOnly=yes",
             "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
             "-o", "LogLevel=ERROR", "cup@127.0.0.1"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            env=dict(os.environ, TERM="xterm-256color"))
        out = b""
        end = time.monotonic() + 60
        while b"palette" not in out and time.monotonic() < end:
            ready, _, _ = select.select([proc.stdout], [], [], 1.0)
            if ready:
                chunk = os.read(proc.stdout.fileno(), 65536)
                if not chunk:
                    break
                out += chunk
        assert b"palette" in out, out[-500:]
        while srv.views.spare is None and time.monotonic() < end:  # the spare comes after
            time.sleep(0.05)
        spare = srv.views.spare
        assert spare is not None, "no spare view was started"
        watched = [v for v in list(srv.views.all) if v.members]
        assert len(watched) == 1
        view = watched[0]
        assert srv.zygote is not None and srv.zygote.warm_s is not None and srv.zygote.warm_s >= 3.0
        assert view.painted_at is not None and spare.started_at is not None
        assert spare.started_at >= view.painted_at, (
            f"the spare started {view.painted_at - spare.started_at:.3f} s before the early spectator's first screen")
    finally:
        if proc is not None:
            proc.kill()
            proc.communicate()
        t.stop()
