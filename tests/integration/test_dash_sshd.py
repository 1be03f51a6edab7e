"""The dashboard's data path end to end over real sshd on 3 loopback machines (ps:0 on m0, worker:0 on m1,
worker:1 on m2).

- The built-in TensorFlow model (the only TensorFlow run here; its two workers paced): `dash --once --json`
  shows the workers' step rates, the PS traffic the trainers account and the PS traffic ps:0's host
  measured in the kernel (its supervisor keeps the rate: one read suffices), and the live dashboard's
  Collector (one agent per host over SSH) and Prometheus show that same measurement (within 10 %).
- A plain-Python program reporting through tfcluster_report on every task (tests/helpers/plain_trainer.py,
  run through `[training] command`; no TensorFlow): a SIGKILLed worker shows as exited/restarting within 3
  intervals in the live Collector, then running again with its restart counted and logged; and
  `status --json` and `dash --once --json` print the same document at every moment of a run: starting,
  running, a task restarting, lost, finished.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from orchestrator.monitor.collect import Collector
from orchestrator.monitor.prometheus import render
from orchestrator.monitor.state_json import state_json
from orchestrator.plan.from_file import plan_file
from orchestrator.run import launch
from orchestrator.run import records as runs
from testkit.sshd import Machines
from tests import requires
from tests.helpers.collecting import state_when
from tests.helpers.plain_trainer import plain_training
from tests.helpers.waiting import wait_for
from tests.integration.lifecycle_helpers import cli, started_run_id, status_json

pytestmark = [pytest.mark.integration, pytest.mark.timeout(400)]

ROLES = [["ps"], ["worker"], ["worker"]]
INTERVAL = 1.0
# The workers sleep 4 times their own step time between steps: they train (and move PS traffic) while the
# test reads them without burning both cores.
TRAINING = {"model": "mlp", "batch_size": 16, "progress_interval": 0.5, "checkpoint_every_secs": 600.0,
            "steps": 1_000_000, "slowdown": {"worker:0": 4.0, "worker:1": 4.0}}


def test_dash_shows_the_builtin_models_step_rates_and_ps_traffic(machines: Machines, tmp_path: Path,
                                                                 state_dir: Path) -> None:
    requires.tensorflow()
    hosts = machines.hosts_toml(tmp_path / "hosts.toml", roles=ROLES, training=TRAINING)
    res = cli(state_dir, "start", str(hosts), "--timeout", "120")
    assert res.returncode == 0, res.stdout + res.stderr
    run_id = started_run_id(res.stdout)

    def training() -> bool:
        _, st = status_json(state_dir, run_id)
        return all(t["state"] == "running" for t in st["tasks"])

    wait_for(training, 60, "every task running")

    def snapshot() -> dict[str, Any]:
        out = cli(state_dir, "dash", run_id, "--once", "--json", "--interval", str(INTERVAL), timeout=90)
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout)

    def healthy() -> dict[str, Any] | None:
        snap = snapshot()
        tasks = {t["name"]: t for t in snap["tasks"]}
        ps = {p["name"]: p for p in snap["ps"]}["ps:0"]
        ok = (all(tasks[w]["state"] == "running" and (tasks[w]["steps_per_s"] or 0) > 0
                  for w in ("worker:0", "worker:1"))
              and tasks["ps:0"]["state"] == "running"
              and all((ps[f"{how}_{way}_Bps"] or 0) > 0 for how in ("accounted", "measured") for way in ("in", "out")))
        return snap if ok else None

    # One read: the rates and the accounted PS traffic come from the workers' newest progress events, the
    # measured PS traffic from the rates ps:0's supervisor keeps of the kernel's counters (its facts).
    snap = wait_for(healthy, 180, "dash --once --json to show a training cluster and its PS traffic", interval=1.0)
    assert snap["totals"]["counts"]["running"] == 3 and snap["totals"]["global_step"] > 0
    assert all(h["reachable"] for h in snap["hosts"])
    # The live dashboard's collector (one agent per host) shows the same measurement, as does Prometheus.
    collector = Collector.for_record(runs.load(run_id), INTERVAL).start()
    try:
        # (ps:0's host sample and the workers' progress events come over different agents' channels:
        # the measured and the accounted rates appear in either order)
        def both() -> dict[str, Any] | None:
            ps0 = state_json(collector.poll())["ps"][0]
            shown = all((ps0[f"{how}_{way}_Bps"] or 0) > 0 for how in ("accounted", "measured") for way in ("in", "out"))
            return ps0 if shown else None

        ps0 = wait_for(both, 30, "the agents to send ps:0's measured and the workers' accounted traffic")
        assert ps0["name"] == "ps:0" and ps0["host"] == "m0" and ps0["peers"], ps0
        exported = [line for line in render(collector.poll()).splitlines()
                    if line.startswith('tfcluster_ps_bytes_per_second{ps="ps:0"') and 'source="measured"' in line]
        assert len(exported) == 2 and all(float(line.rsplit(" ", 1)[1]) > 0 for line in exported), exported
        live, once = _same_traffic(collector, snapshot)
        for key in ("measured_in_Bps", "measured_out_Bps"):
            assert abs(once[key] - live[key]) <= 0.10 * live[key], (key, once, live)
    finally:
        collector.close()
    stopped = cli(state_dir, "stop", run_id)  # the checks are done: the TensorFlow run ends now
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr


def _same_traffic(collector: Collector, snapshot: Callable[[], dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any]]:
    """ps:0's traffic as the live collector and `dash --once --json` show it, read at the same moment: the
    collector before and after the one read; a read while the rate moved by more than 10 % between
    the two (training is bursty at start) is made again. (live, once)"""
    for _ in range(5):
        before = state_json(collector.poll())["ps"][0]
        once = {p["name"]: p for p in snapshot()["ps"]}["ps:0"]
        after = state_json(collector.poll())["ps"][0]
        if all(abs(after[k] - before[k]) <= 0.10 * before[k] for k in ("measured_in_Bps", "measured_out_Bps")):
            return after, once
    raise AssertionError(f"ps:0's measured rate never held still for one read: {before} then {after}")


# Fields that move with time between two reads of the same run; every other field must be equal.
MOVING = {"now", "age_s", "cpu_s", "local_step", "global_step", "loss", "steps_per_s", "examples_per_s", "totals",
          "log", "ps", "allreduce", "cpu_pct", "mem_pct", "gpus"}


def _differences(a: Any, b: Any, where: str = "") -> list[str]:
    """Where two JSON documents differ: keys anywhere, and values but those that move with time (which
    must then be present in both, or absent in both)."""
    if isinstance(a, dict) and isinstance(b, dict):
        if a.keys() != b.keys():
            return [f"{where}: keys {sorted(a)} != {sorted(b)}"]
        return [d for key in a for d in (
            ([] if (a[key] is None) == (b[key] is None) else [f"{where}.{key}: {a[key]!r} vs {b[key]!r}"])
            if key in MOVING else _differences(a[key], b[key], f"{where}.{key}"))]
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b, strict=True)) for d in _differences(x, y, f"{where}[{i}]")]
    return [] if a == b else [f"{where}: {a!r} != {b!r}"]


def _both(state_dir: Path, run_id: str) -> tuple[int, dict[str, Any]]:
    """`status --json`, `dash --once --json`, `status --json` again: when the two status documents say the
    run did not change meanwhile, dash's must be the same document, with the same exit code. (A run in
    the middle of a change, e.g. a task's first report, is read again.) (exit code, the document)."""
    for _ in range(5):
        code, before = status_json(state_dir, run_id)
        dash = cli(state_dir, "dash", run_id, "--once", "--json", timeout=60)
        again, after = status_json(state_dir, run_id)
        if (code, _differences(before, after)) == (again, []):
            assert dash.returncode == code, (code, dash.returncode, dash.stderr)
            assert _differences(before, json.loads(dash.stdout)) == [], dash.stdout
            return code, before
    raise AssertionError(f"the run never held still for two reads: {_differences(before, after)}")


def _tasks(st: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {t["name"]: t for t in st["tasks"]}


def _start(machines: Machines, tmp_path: Path, name: str, backoff: float) -> tuple[str, Path]:
    """A run of the plain trainer (tests/helpers/plain_trainer.py) on the 3 machines, restarted on failure,
    started through the product's own launch with a restart backoff of `backoff` seconds; (run id, the
    release file that ends the chief)."""
    release = tmp_path / f"release-{name}"
    hosts = machines.hosts_toml(tmp_path / "hosts.toml", roles=ROLES,
                                training=plain_training(tmp_path, release, restart="on-failure"))
    options = launch.StartOptions(timeout=120, run_name=name, supervisor={"backoff_initial": backoff})
    return launch.start(plan_file(hosts), str(hosts), options).record.run_id, release


def test_live_collector_sees_a_sigkilled_worker_exit_and_come_back(machines: Machines, tmp_path: Path,
                                                                    state_dir: Path) -> None:
    run_id, _release = _start(machines, tmp_path, "killed", backoff=1.0)
    collector = Collector.for_record(runs.load(run_id), INTERVAL).start()
    try:
        st = state_when(collector, lambda s: s.tasks["worker:1"].state == "running"
                        and bool(s.tasks["worker:1"].pid), 60, "worker:1 running")
        pid = st.tasks["worker:1"].pid
        assert pid is not None
        os.kill(pid, signal.SIGKILL)  # every loopback machine shares this kernel
        killed = time.monotonic()
        state_when(collector, lambda s: s.tasks["worker:1"].state in ("exited", "restarting"), 10 * INTERVAL,
                   "worker:1 exited or restarting")
        # Time is what is under test here: the live dashboard shows a dead task within 3 of its intervals.
        seen = time.monotonic() - killed
        assert seen <= 3 * INTERVAL, f"took {seen:.2f}s"
        # ... and it comes back (the supervisor restarts it) with the restart counted
        state_when(collector, lambda s: s.tasks["worker:1"].state == "running"
                   and s.tasks["worker:1"].restarts == 1, 120, "worker:1 running again, its restart counted")
        kinds = [e.kind for e in collector.state.log]
        assert "restart" in kinds and "recover" in kinds  # the supervisor goes straight to restarting
        assert any("restarting after exit code -9" in e.text for e in collector.state.log)
    finally:
        collector.close()


def test_status_and_dash_once_agree_field_for_field_through_a_run(machines: Machines, tmp_path: Path,
                                                                  state_dir: Path) -> None:
    """At every moment of a run (starting, running, a task restarting, lost, finished) `status --json`
    and `dash --once --json` print the same document and exit with the same code."""
    run_id, release = _start(machines, tmp_path, "agree", backoff=20.0)
    _, st = _both(state_dir, run_id)  # starting: right after `start`
    assert st["state"] == "running" and set(_tasks(st)) == {"ps:0", "worker:0", "worker:1"}

    def reporting() -> dict[str, Any] | None:
        st = _both(state_dir, run_id)[1]
        return st if all(t["state"] == "running" and t["steps_per_s"] for t in st["tasks"]) else None

    st = wait_for(reporting, 120, "every task running with its rate", interval=1.0)
    pid = _tasks(st)["worker:1"]["pid"]
    os.kill(pid, signal.SIGKILL)  # every loopback machine shares this kernel

    def restarting() -> dict[str, Any] | None:
        code, st = _both(state_dir, run_id)
        return st if code == 0 and _tasks(st)["worker:1"]["state"] == "restarting" else None

    st = wait_for(restarting, 15, "worker:1 restarting (its supervisor waits 20 s first)", interval=0.5)
    w1 = _tasks(st)["worker:1"]
    assert (w1["exit_code"], w1["restarts"], w1["steps_per_s"], w1["failed"]) == (-9, 1, None, False)
    wait_for(lambda: _tasks(_both(state_dir, run_id)[1])["worker:1"]["state"] == "running", 90,
             "worker:1 running again", interval=1.0)
    release.touch()  # the chief (worker:0) ends, exit 0; the tasks still running then are ended by the run

    def finished() -> dict[str, Any] | None:
        code, st = _both(state_dir, run_id)
        return st if code == 0 and st["state"] == "finished" else None

    st = wait_for(finished, 60, "the run to finish", interval=1.0)
    assert all(t["state"] == "exited" and t["final"] and not t["failed"]
               and (t["exit_code"] == 0 or t["stopped_by"] == "run") for t in st["tasks"]), st["tasks"]


def test_status_and_dash_once_agree_on_a_lost_host(machines: Machines, tmp_path: Path, state_dir: Path) -> None:
    run_id, _release = _start(machines, tmp_path, "lost", backoff=1.0)
    wait_for(lambda: _tasks(_both(state_dir, run_id)[1])["worker:1"]["steps_per_s"], 120, "worker:1 training",
             interval=1.0)
    m2 = runs.load(run_id).host("m2")
    supervisor = json.loads(Path(m2.run_dir, "state", "supervisor-m2.json").read_text())["pid"]
    os.killpg(supervisor, signal.SIGKILL)  # the supervisor and every task of its host: a lost host's run

    def lost() -> dict[str, Any] | None:
        code, st = _both(state_dir, run_id)
        return st if _tasks(st)["worker:1"]["state"] == "lost" and code == 3 else None

    st = wait_for(lost, 30, "worker:1 lost", interval=0.5)
    m2_json = next(h for h in st["hosts"] if h["name"] == "m2")
    assert (m2_json["supervisor_alive"], m2_json["processes"], st["state"]) == (False, 0, "partial"), st
    assert _tasks(st)["worker:0"]["state"] == "running"
