"""The first-build verifier scripts (spec §4) and the built-in/external adapters, for real.

Part 1 (no territory): the verifiers against the built-in app run as a local process,
and against broken services, with exactly the §4 environment.

Part 2 (``container``): one module-scoped set of four real container territories:
``oracle``, ``scripted:memory``, ``scripted:volatile`` and the tiny external adapter
(``tests/adapters/tiny-adapter.sh`` through :class:`CommandAdapter`). The real verifier
scripts run in milestone order with chained previous evidence; ``host-reboot`` runs after
``provider.reboot()``. Expected: oracle and tiny pass all four; memory passes service-up
and write-read and fails service-restart; volatile passes up to service-restart and
fails host-reboot; ``scripted:slow`` (short delay) passes once it has started.
"""

from __future__ import annotations

import asyncio
import http.server
import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import pytest_asyncio

from aoe_tui.agents.base import AdapterStatus, AgentContext
from aoe_tui.agents.command import CommandAdapter
from aoe_tui.agents.oracle import DURABLE_STORAGE, render_app
from aoe_tui.agents.registry import resolve_adapter
from aoe_tui.agents.scripted import ScriptedAdapter
from aoe_tui.domain.arena import AgentDef, Budget, load_manifest
from aoe_tui.domain.world import MilestoneView
from aoe_tui.runtime.provider import Territory, write_credential_file

REPO = Path(__file__).resolve().parent.parent
ARENA = REPO / "arenas" / "first-build"
MILESTONES = ("service-up", "write-read", "service-restart", "host-reboot")
TINY = REPO / "tests" / "adapters" / "tiny-adapter.sh"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Verifiers:
    """Runs the package's verifier scripts for one territory with the §4 environment,
    chaining evidence through ``previous.json`` (a map milestone -> MilestoneView)."""

    def __init__(self, territory: Territory, evidence_dir: Path) -> None:
        self.t = territory
        self.dir = evidence_dir
        self.dir.mkdir(parents=True, exist_ok=True)
        self.views: dict[str, MilestoneView] = {}
        self.timeouts = {m.id: m.timeout_seconds for m in load_manifest(ARENA / "arena.toml").manifest.build.milestones}

    def run(self, milestone: str) -> subprocess.CompletedProcess[str]:
        prev = dict(self.views)
        prev[milestone] = MilestoneView(evaluating=True)
        previous = self.dir / "previous.json"
        previous.write_text(json.dumps({k: v.model_dump() for k, v in prev.items()}))
        evidence = self.dir / f"{milestone}.json"
        evidence.unlink(missing_ok=True)
        env = dict(
            os.environ,
            AOE_TERRITORY_ID=self.t.id,
            AOE_HOST=self.t.host,
            AOE_SSH_PORT=str(self.t.ssh_port),
            AOE_SERVICE_PORT=str(self.t.service_port),
            AOE_CREDENTIAL_FILE=str(self.t.credential_file),
            AOE_PREVIOUS_EVIDENCE=str(previous),
            AOE_EVIDENCE_FILE=str(evidence),
        )
        proc = subprocess.run(
            [str(ARENA / "verify" / f"{milestone}.sh")], env=env, capture_output=True, text=True,
            timeout=self.timeouts[milestone] + 5, stdin=subprocess.DEVNULL,
        )
        if proc.returncode == 0:
            data = json.loads(evidence.read_text())
            self.views[milestone] = MilestoneView(passed=True, evidence=data)
        return proc

    def evidence(self, milestone: str):
        return self.views[milestone].evidence


def one_line_failure(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode != 0
    err = proc.stderr.strip()
    assert err and "\n" not in err, f"stderr must be one line: {proc.stderr!r}"
    return err


# ------------------------------------------------------------------ part 1: local


@pytest.fixture
def local_app(tmp_path):
    """The built-in durable app as a local process on a free port (real HTTP, real sqlite)."""
    port = free_port()
    app = tmp_path / "app.py"
    app.write_text(render_app(DURABLE_STORAGE))
    env = dict(os.environ, BUILDER_PORT=str(port), BUILDER_STORAGE=f"sqlite:{tmp_path / 'db' / 'r.sqlite3'}")
    proc = subprocess.Popen([sys.executable, str(app)], env=env)
    for _ in range(100):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            time.sleep(0.05)
    cred = write_credential_file(tmp_path / "cred.env", "local-pw")
    t = Territory(id="builder-one", host="127.0.0.1", ssh_port=1, service_port=port, password="local-pw", credential_file=cred)
    yield t, proc
    proc.kill()
    proc.wait()


def test_service_up_and_write_read_pass_on_a_correct_service(local_app, tmp_path):
    t, _ = local_app
    v = Verifiers(t, tmp_path / "ev")
    p = v.run("service-up")
    assert p.returncode == 0, p.stderr
    assert v.evidence("service-up") == {"health": "ready"}
    p = v.run("write-read")
    assert p.returncode == 0, p.stderr
    ev = v.evidence("write-read")
    assert set(ev) == {"record", "value"}
    assert ev["record"].startswith("record-") and len(ev["record"]) == len("record-") + 16
    assert ev["value"].startswith("opaque-") and len(ev["value"]) == len("opaque-") + 32
    # the record really is in the service, byte for byte
    import urllib.request

    body = urllib.request.urlopen(f"http://127.0.0.1:{t.service_port}/records/{ev['record']}").read()
    assert body == ev["value"].encode()
    # a second run makes a fresh opaque record
    assert v.run("write-read").returncode == 0
    assert v.evidence("write-read")["record"] != ev["record"]


def test_verifiers_fail_with_one_line_when_nothing_listens(tmp_path):
    cred = write_credential_file(tmp_path / "cred.env", "pw")
    t = Territory(id="builder-one", host="127.0.0.1", ssh_port=1, service_port=free_port(), password="pw", credential_file=cred)
    v = Verifiers(t, tmp_path / "ev")
    assert "GET /health: no answer" in one_line_failure(v.run("service-up"))
    assert "PUT /records/" in one_line_failure(v.run("write-read"))
    assert not (tmp_path / "ev" / "service-up.json").exists()


class _Bad(http.server.BaseHTTPRequestHandler):
    """A wrong service: /health says 'starting', GET of records returns something else."""

    def log_message(self, *a):
        pass

    def _send(self, code, body):
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        self._send(200, b"starting" if self.path == "/health" else b"{\"value\": \"wrapped\"}")

    def do_PUT(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self._send(201, b"")


def test_verifiers_reject_wrong_health_body_and_wrong_value(tmp_path):
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Bad)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        cred = write_credential_file(tmp_path / "cred.env", "pw")
        t = Territory(id="builder-one", host="127.0.0.1", ssh_port=1, service_port=srv.server_address[1],
                      password="pw", credential_file=cred)
        v = Verifiers(t, tmp_path / "ev")
        assert "expected 'ready'" in one_line_failure(v.run("service-up"))
        assert "different value" in one_line_failure(v.run("write-read"))
    finally:
        srv.shutdown()


def test_restart_and_reboot_need_earlier_evidence(local_app, tmp_path):
    t, _ = local_app
    v = Verifiers(t, tmp_path / "ev")
    assert "no write-read evidence" in one_line_failure(v.run("service-restart"))
    assert "no record/value" in one_line_failure(v.run("host-reboot"))


def test_package_layout_keeps_verifiers_inside_and_top_level_link_works():
    from aoe_tui.domain.arena import validate_package

    report = validate_package(ARENA)
    assert report.valid, report.errors
    top = REPO / "verify" / "first-build"
    for m in MILESTONES:
        assert (top / f"{m}.sh").resolve() == (ARENA / "verify" / f"{m}.sh").resolve()
        assert os.access(ARENA / "verify" / f"{m}.sh", os.X_OK)


# -------------------------------------------------------------- part 2: containers


container_heat = pytest.mark.asyncio(loop_scope="module")

SEATS = (
    ("builder-one", "oracle"),
    ("builder-two", "scripted:memory"),
    ("builder-three", "scripted:volatile"),
    ("builder-four", "tiny"),
    ("builder-five", "scripted:slow"),
)
SLOW_DELAY_S = 2.0


def _need_container_host() -> None:
    if os.geteuid() != 0:
        pytest.skip("container territories need root")
    from shutil import which

    if which("systemd-nspawn") is None:
        pytest.skip("systemd-nspawn not installed (apt-get install systemd-container)")
    for tool in ("curl", "jq", "sshpass", "ssh"):
        if which(tool) is None:
            pytest.skip(f"{tool} not installed (run ./setup.sh)")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def heat(guest_image, tmp_path_factory):
    """Four container territories with an agent deployed on each: {territory_id: (Territory, run, outcome, ctx)}."""
    _need_container_host()
    from aoe_tui.runtime.container import ContainerProvider
    from aoe_tui.runtime.provider import TerritorySpec

    work = tmp_path_factory.mktemp("verifiers")
    provider = ContainerProvider(work / "territories", image=guest_image, heat_id=f"test-verifiers-{os.getpid()}")
    try:
        territories = await provider.provision(
            [TerritorySpec(id=tid, password=f"{tid}-race", index=i) for i, (tid, _) in enumerate(SEATS)]
        )
        runs = {}
        for t, (tid, spec) in zip(territories, SEATS):
            agent = AgentDef(id=f"{tid}-agent", territory=tid, adapter=spec, model="test", budget=Budget(resource_units=1))
            agent_dir = work / "agents" / agent.id
            agent_dir.mkdir(parents=True)
            (agent_dir / "instruction.md").write_text("deploy the first-build service\n")
            ctx = AgentContext(agent=agent, territory=t, agent_dir=agent_dir,
                               instruction_file=agent_dir / "instruction.md", deadline_s=120, arena_dir=ARENA)
            if spec == "tiny":
                adapter = CommandAdapter("tiny", TINY)
            elif spec == "scripted:slow":
                adapter = ScriptedAdapter("slow", start_delay_s=SLOW_DELAY_S)
            else:
                adapter = resolve_adapter(spec)
            runs[tid] = (t, await adapter.start(ctx), ctx, time.monotonic())
        result = {}
        for tid, (t, run, ctx, t0) in runs.items():
            outcome = await asyncio.wait_for(run.wait(), 150)
            result[tid] = (t, run, outcome, ctx, time.monotonic() - t0)
        yield provider, result, work
    finally:
        await provider.teardown()


@pytest.mark.container
@container_heat
async def test_agents_complete_and_report_usage(heat):
    _, result, _ = heat
    for tid, (t, run, outcome, ctx, seconds) in result.items():
        assert outcome.status == AdapterStatus.COMPLETED, (tid, outcome, list(run.activity))
        written = json.loads(ctx.result_file.read_text())
        assert written["status"] == "completed" and written["agent"] == ctx.agent.id
        usage = json.loads(ctx.usage_file.read_text())
        assert usage["agent"] == ctx.agent.id and usage["territory"] == tid
        assert len(run.activity) >= 1
    _, _, oracle, _, oracle_s = result["builder-one"]
    assert oracle.summary == "oracle deployed durable service" and oracle.usage.resource_units == 1
    assert oracle.usage.input_tokens is None
    assert oracle_s < 10, f"oracle took {oracle_s:.1f} s"
    _, run, memory, _, _ = result["builder-two"]
    assert memory.usage.input_tokens and memory.usage.output_tokens and memory.usage.cost_microusd
    assert any(line.startswith("$ systemctl cat builder-app.service") for line in run.activity)
    _, run, slow, _, slow_s = result["builder-five"]
    assert slow.status == AdapterStatus.COMPLETED and slow_s >= SLOW_DELAY_S
    assert run.activity[0].startswith("thinking")
    _, run, tiny, ctx, _ = result["builder-four"]
    assert tiny.usage.input_tokens == 5200 and tiny.usage.output_tokens == 655 and tiny.usage.cost_microusd == 7820
    assert "tiny-adapter: done" in ctx.stdout_file.read_text()
    # the password never reaches the adapter's logs or files
    for path in ctx.agent_dir.iterdir():
        assert "builder-four-race" not in path.read_text(errors="replace"), path


def _verify_chain(heat, tid: str) -> tuple[Verifiers, dict[str, subprocess.CompletedProcess[str]]]:
    _, result, work = heat
    t = result[tid][0]
    v = Verifiers(t, work / "evidence" / tid)
    procs = {}
    for m in MILESTONES[:3]:
        procs[m] = v.run(m)
        if procs[m].returncode != 0:
            break
    return v, procs


async def _reboot_and_verify(heat, v: Verifiers) -> subprocess.CompletedProcess[str]:
    provider, result, _ = heat
    await provider.reboot(v.t)
    return await asyncio.to_thread(v.run, "host-reboot")


@pytest.mark.container
@container_heat
async def test_oracle_passes_every_milestone(heat):
    v, procs = await asyncio.to_thread(_verify_chain, heat, "builder-one")
    assert all(p.returncode == 0 for p in procs.values()), {m: p.stderr for m, p in procs.items()}
    wr = v.evidence("write-read")
    sr = v.evidence("service-restart")
    assert sr["restart"] is True and (sr["record"], sr["value"]) == (wr["record"], wr["value"]) and sr["boot_id"]
    p = await _reboot_and_verify(heat, v)
    assert p.returncode == 0, p.stderr
    hr = v.evidence("host-reboot")
    assert hr["reboot"] is True and (hr["record"], hr["value"]) == (wr["record"], wr["value"])
    assert hr["boot_id"] != sr["boot_id"]


@pytest.mark.container
@container_heat
async def test_memory_builder_fails_service_restart(heat):
    v, procs = await asyncio.to_thread(_verify_chain, heat, "builder-two")
    assert procs["service-up"].returncode == 0 and procs["write-read"].returncode == 0
    err = one_line_failure(procs["service-restart"])
    assert "404" in err and "record lost" in err
    # a retry on the next tick fails again: the record is gone for good
    assert v.run("service-restart").returncode != 0


@pytest.mark.container
@container_heat
async def test_volatile_builder_fails_host_reboot(heat):
    v, procs = await asyncio.to_thread(_verify_chain, heat, "builder-three")
    assert all(p.returncode == 0 for p in procs.values()), {m: p.stderr for m, p in procs.items()}
    p = await _reboot_and_verify(heat, v)
    err = one_line_failure(p)
    assert "record lost" in err or "no answer" in err


@pytest.mark.container
@container_heat
async def test_tiny_external_adapter_passes_every_milestone(heat):
    v, procs = await asyncio.to_thread(_verify_chain, heat, "builder-four")
    assert all(p.returncode == 0 for p in procs.values()), {m: p.stderr for m, p in procs.items()}
    p = await _reboot_and_verify(heat, v)
    assert p.returncode == 0, p.stderr


@pytest.mark.container
@container_heat
async def test_slow_builder_is_correct_once_it_starts(heat):
    v, procs = await asyncio.to_thread(_verify_chain, heat, "builder-five")
    assert all(p.returncode == 0 for p in procs.values()), {m: p.stderr for m, p in procs.items()}
    assert len(procs) == 3


@pytest.mark.container
@container_heat
async def test_host_reboot_without_reboot_is_rejected(heat):
    """Same boot id as at service-restart: the verifier refuses to credit a reboot."""
    _, result, work = heat
    t = result["builder-one"][0]
    v = Verifiers(t, work / "evidence" / "no-reboot")
    for m in MILESTONES[:3]:
        assert (await asyncio.to_thread(v.run, m)).returncode == 0
    err = one_line_failure(await asyncio.to_thread(v.run, "host-reboot"))
    assert "did not reboot" in err


@pytest.mark.container
@container_heat
async def test_verifier_output_never_contains_the_password(heat):
    _, _, work = heat
    for path in (work / "evidence").rglob("*"):
        if path.is_file():
            text = path.read_text(errors="replace")
            assert "-race" not in text, path
