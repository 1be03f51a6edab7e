"""Collector against real agents over the real LocalTransport (no TF): events become ClusterState; a dropped
stream makes the host unreachable and is reconnected; a host that cannot be reached never breaks the
collector; logs and signals reach the task; `tfcluster dash --once --json` prints the state."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator.config.schema import Config
from orchestrator.errors import HostError
from orchestrator.monitor.collect import Collector
from orchestrator.monitor.prometheus import render
from orchestrator.plan.from_file import plan_config
from orchestrator.plan.model import HostPlan
from orchestrator.run import records as runs
from orchestrator.run.sh_procs import SIGNAL_MARK
from orchestrator.transport.base import Transport
from orchestrator.transport.factory import transport_for
from tests.helpers.collecting import state_when
from tests.helpers.terminal import Terminal
from tests.helpers.waiting import async_wait_for, wait_for
from training.run.layout import HOST_PACKAGE, RUN_DIR_ENV
from training.telemetry.schema import dumps, make_event

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]
ROOT = Path(__file__).resolve().parents[2]
INTERVAL = 0.25


class FakeRun:
    """Run dirs for hosts a and b (lib/ links to this checkout's training package), a plan, writers
    appending progress like TF tasks do, and a real `sleep` standing in for worker-0's process."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.run_id = "collect-test"
        self.dirs: dict[str, Path] = {}
        for h in ("a", "b"):
            d = tmp / h / "runs" / self.run_id / h
            for sub in ("code", "lib", "events", "logs", "state"):
                (d / sub).mkdir(parents=True)
            (d / "lib" / HOST_PACKAGE).symlink_to(ROOT / "training")
            self.dirs[h] = d
        self.plan = plan_config(Config.model_validate({
            "cluster": {"name": "t", "mode": "in-graph"},  # with a command: no ps needed (no ps events here)
            "training": {"command": "true"},
            "remote": {"python": sys.executable},
            "hosts": [{"name": h, "address": "127.0.0.1", "transport": "local", "roles": roles,
                       "workdir": str(tmp / h)} for h, roles in (("a", ["worker"]), ("b", ["chief", "worker"]))],
        }))
        self.sleeper = subprocess.Popen(["sleep", "60"], env={**os.environ, RUN_DIR_ENV: str(self.dirs["a"])})
        (self.dirs["a"] / "logs" / "worker-0.log").write_text("".join(f"line {i}\n" for i in range(50)))
        self.stop = threading.Event()
        self.writer = threading.Thread(target=self._write, daemon=True)

    def _write(self) -> None:
        step = 0
        for h, i in (("a", 0), ("b", 1)):
            with open(self.dirs[h] / "events" / f"supervisor-{h}.jsonl", "a") as f:
                pid = self.sleeper.pid if i == 0 else 4242
                f.write(dumps(make_event("task_state", h, job="worker", task=i, state="running", pid=pid)) + "\n")
        while not self.stop.is_set():
            step += 1
            for h, i in (("a", 0), ("b", 1)):
                with open(self.dirs[h] / "events" / f"worker-{i}.jsonl", "a") as f:
                    f.write(dumps(make_event("progress", h, job="worker", task=i, local_step=step * 4,
                                             global_step=step * 8, examples=step * 4 * 32, loss=1.0 / step,
                                             interval_s=INTERVAL)) + "\n")
            self.stop.wait(INTERVAL)

    def record(self) -> runs.RunRecord:
        return runs.RunRecord(self.run_id, "hosts.toml", "t", "between-graph", time.time(), self.plan,
                              [runs.HostRecord(h, str(self.tmp / h), str(d), sys.executable)
                               for h, d in self.dirs.items()], status="started")

    def close(self) -> None:
        self.stop.set()
        if self.sleeper.poll() is None:
            self.sleeper.kill()
        self.sleeper.wait()


@pytest.fixture
def fake_run(tmp_path: Path) -> Iterator[FakeRun]:
    run = FakeRun(tmp_path)
    run.writer.start()
    try:
        yield run
    finally:
        run.close()


def test_collector_builds_state_and_survives_a_dropped_stream(fake_run: FakeRun) -> None:
    collector = Collector.for_record(fake_run.record(), INTERVAL).start()
    try:
        st = collector.wait_for_data(3, timeout=20)
        for name in ("worker:0", "worker:1"):
            tv = st.tasks[name]
            assert tv.state == "running", tv
            assert tv.steps_per_s == pytest.approx(4 / INTERVAL, rel=0.5)
        assert st.hosts["a"].cpu_pct is not None and st.hosts["a"].reachable
        assert st.tasks["worker:0"].pid == fake_run.sleeper.pid
        # drop host b's stream by killing its agent: unreachable, then reconnected and back
        stream_b = next(s for s in collector.streams if s.host.name == "b")
        proc = stream_b._stream._proc  # type: ignore[union-attr]
        os.killpg(proc.pid, signal.SIGKILL)  # the agent and its shell
        state_when(collector, lambda s: s.tasks["worker:1"].state == "unreachable", 10, "worker:1 unreachable")
        assert collector.state.tasks["worker:1"].steps_per_s is not None  # last value kept
        state_when(collector, lambda s: s.tasks["worker:1"].state == "running", 20, "worker:1 back")
        assert stream_b.connects >= 2
        kinds = [e.kind for e in collector.state.log]
        assert "host-lost" in kinds and "host-back" in kinds
        # logs and actions reach the host
        assert collector.task_log("worker", 0, 5) == [f"line {i}" for i in range(45, 50)]
        # worker:1's pid (4242) is no process of the run: a pid a tick old may be anyone's by now
        assert collector.signal_task("worker", 1, "KILL").endswith(f"failed: pid 4242: {SIGNAL_MARK}")
        msg = collector.signal_task("worker", 0, "KILL")
        assert "sent SIGKILL" in msg
        assert fake_run.sleeper.wait(timeout=5) == -signal.SIGKILL
        text = render(collector.state)
        assert 'tfcluster_task_state{task="worker:0",job="worker",host="a",state="running"} 1' in text
    finally:
        t0 = time.monotonic()
        collector.close()
        assert time.monotonic() - t0 < 10
    assert not any(s.is_alive() for s in collector.streams)


def test_unreachable_host_never_breaks_the_collector(fake_run: FakeRun) -> None:
    def opener(host: HostPlan) -> Transport:
        if host.name == "b":
            raise HostError("b", "unreachable", "connection refused")
        return transport_for(host)

    record = fake_run.record()
    collector = Collector.for_record(record, INTERVAL, opener=opener).start()
    try:
        state_when(collector, lambda s: s.tasks["worker:0"].state == "running"
                   and s.tasks["worker:1"].state == "unreachable", 20, "a running, b unreachable")
        assert any("connection refused" in e.text for e in collector.state.log)
        assert record.plan.hosts[1].name == "b"
    finally:
        collector.close()


def test_dash_once_json_cli(fake_run: FakeRun, tmp_path: Path) -> None:
    env = {**os.environ, runs.STATE_DIR_ENV: str(tmp_path / "state")}
    os.environ[runs.STATE_DIR_ENV] = env[runs.STATE_DIR_ENV]
    try:
        runs.save(fake_run.record())
    finally:
        del os.environ[runs.STATE_DIR_ENV]
    progress = fake_run.dirs["a"] / "events" / "worker-0.jsonl"
    # a rate needs two samples: a warm CLI reads the host before the writer's second one otherwise
    wait_for(lambda: progress.exists() and len(progress.read_text().splitlines()) >= 2, 10,
             "two progress samples of worker:0")
    res = subprocess.run([sys.executable, "-m", "tfcluster", "dash", fake_run.run_id, "--once", "--json",
                          "--interval", str(INTERVAL)], check=False, cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=60)
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    tasks = {t["name"]: t for t in out["tasks"]}
    assert tasks["worker:0"]["state"] == "running" and tasks["worker:0"]["steps_per_s"] > 0
    assert out["totals"]["counts"]["running"] == 2
    bad = subprocess.run([sys.executable, "-m", "tfcluster", "dash", "no-such-run", "--once"], check=False, cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "unknown run" in bad.stderr and "Traceback" not in bad.stderr


def test_dashboard_on_a_live_collector(fake_run: FakeRun) -> None:
    """The Textual app on real agent streams: rows turn running, the task screen tails the real log over
    the transport, and `k` + `y` SIGKILLs the real process behind worker-0."""
    import asyncio

    from textual.widgets import DataTable
    from textual.widgets.data_table import CellDoesNotExist

    from orchestrator.monitor.collect import CollectorActions
    from tui.app import DashboardApp
    from tui.screens.confirm import ConfirmScreen
    from tui.screens.task import TaskScreen

    collector = Collector.for_record(fake_run.record(), INTERVAL).start()

    async def drive() -> None:
        app = DashboardApp(collector, CollectorActions(collector), interval=INTERVAL)
        async with app.run_test(size=(80, 24)) as pilot:
            table = app.query_one("#tasks", DataTable)

            def worker0_running() -> bool:
                with contextlib.suppress(CellDoesNotExist):  # its row is not drawn yet
                    return "running" in str(table.get_cell("worker:0", "state"))
                return False

            await async_wait_for(worker0_running, 20, "the table to show worker:0 running", pause=pilot.pause)
            await pilot.press("enter")
            screen = await async_wait_for(lambda: isinstance(app.screen, TaskScreen) and app.screen._log_lines
                                          and app.screen, 10, "the task screen with its log", pause=pilot.pause)
            assert screen._log_lines[-1] == "line 49"
            await pilot.press("escape")
            await pilot.press("k")
            await async_wait_for(lambda: isinstance(app.screen, ConfirmScreen), 10, "the question", pause=pilot.pause)
            await pilot.press("y")
            await app.workers.wait_for_complete()
            await pilot.press("q")

    try:
        asyncio.run(drive())
        assert fake_run.sleeper.wait(timeout=5) == -signal.SIGKILL
    finally:
        collector.close()


def test_status_watch_live_table_until_ctrl_c(fake_run: FakeRun) -> None:
    """`status --watch` in a terminal: its live table shows both workers running, then Ctrl-C ends it
    (exit 0) with that table left on the screen."""
    runs.save(fake_run.record())  # in the test's state dir (conftest's state_dir), which the CLI inherits

    def both_running(text: str) -> bool:
        frame = text[text.rfind("run collect-test"):].splitlines()
        return all(any(name in line and "running" in line for line in frame) for name in ("worker:0", "worker:1"))

    argv = [sys.executable, "-m", "tfcluster", "status", fake_run.run_id, "--watch"]
    with Terminal(argv, dict(os.environ), ROOT, columns=160) as term:
        term.wait_until_shown(both_running, 30, "the live table to show both workers running")
        term.proc.send_signal(signal.SIGINT)
        assert term.wait_exit(20) == 0, term.text()[-3000:]
        assert both_running(term.text()), term.text()[-3000:]
