"""Bad input to the cluster commands, as a new organiser types it (no cluster needed): each
gives one line naming the option or the file's field, exit status 1/2, no traceback, no
credential in the output, and ``aoe run`` touches no season folder before the cluster is
known to answer. (Before: ``aoe run --cluster`` at a port where no cluster runs waited for
Ray forever, with Ray's own warning lines; a runner given its token only by
``RAY_AUTH_TOKEN_PATH`` imported Ray before setting the token mode and was refused, forever.)"""

from __future__ import annotations

import socket
from pathlib import Path

from cluster_support import REPO, aoe


def _closed_port() -> int:
    """A TCP port on 127.0.0.1 nobody listens on (bound, then closed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _one_error_line(res, *needles: str) -> str:
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert res.returncode in (1, 2), (res.returncode, res.stdout, res.stderr)
    assert len(lines) == 1 and lines[0].startswith("aoe: error: "), res.stderr
    assert "Traceback" not in res.stderr + res.stdout
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


def test_aoe_run_refuses_a_cluster_it_cannot_use_in_one_line(tmp_path: Path) -> None:
    season = tmp_path / "demo.toml"
    text = (REPO / "seasons" / "demo.toml").read_text().replace("../arenas", str(REPO / "arenas"))
    season.write_text(text)
    port = _closed_port()
    secret = "0123456789abcdef-not-to-be-printed"
    token = tmp_path / "tok"
    token.write_text(secret)
    token.chmod(0o600)
    env_tok = {"RAY_AUTH_TOKEN_PATH": str(token), "HOME": str(tmp_path)}

    # --cluster where nothing listens: one line naming the option, at once, no folder
    out = tmp_path / "out1"
    res = aoe("run", str(season), "--cluster", f"127.0.0.1:{port}", "--headless", "-o", str(out),
              env=env_tok, timeout=60)
    _one_error_line(res, "--cluster", f"127.0.0.1:{port}", "cannot connect")
    assert not out.exists()

    # the season file's [cluster] table: the line names the file and the field
    table = tmp_path / "table.toml"
    table.write_text(text + f'\n[cluster]\naddress = "127.0.0.1:{port}"\n')
    res = aoe("run", str(table), "--headless", "-o", str(tmp_path / "out2"), env=env_tok, timeout=60)
    _one_error_line(res, "table.toml", "cluster.address", "cannot connect")

    # a token file others can read, named by --token-file: refused, the value never shown
    token.chmod(0o644)
    res = aoe("run", str(season), "--cluster", f"127.0.0.1:{port}", "--token-file", str(token), "--headless",
              "-o", str(tmp_path / "out3"), env={"HOME": str(tmp_path)}, timeout=60)
    _one_error_line(res, str(token), "chmod 600")
    assert secret not in res.stdout + res.stderr

    # a worker whose --workdir is a file
    res = aoe("worker", "start", "--address", f"127.0.0.1:{port}", "--workdir", str(season),
              "--token-file", str(token), timeout=60)
    _one_error_line(res, "--workdir", str(season), "not a folder")
