"""One real run the fault tests share: `tfcluster start` over real sshd, between-graph, real TensorFlow.

`FaultRun` wraps the CLI calls and the independent views a fault test needs: the run's status (the
CLI's JSON), each trainer's progress events (tests/faults/measure.py), the run's processes found by
their environment marker (tests/integration/lifecycle_helpers.run_processes), pids, logs.

Every fault of one run is a stage of one test module (pytest runs them in file order): starting a
TensorFlow cluster costs ~20 s of a 2-core machine, so faults whose effects are separable share it. A stage
fails alone: it restores what it broke in a `finally` (a stopped process continued, a machine or network
back, space freed) and starts by waiting for its preconditions (`wait_healthy`: every task running and
training), so a stage that failed hands the next one a healthy run, if a late one.
The trainers are paced (`slowdown`: each sleeps a few times its own step time) so that a run lasts
through its stages without burning both cores. When the run ends, each host's logs and events are
copied next to the test's files (`kept/<host>/`): a machine's own directory goes when it is closed.

Faults of tfcluster's own machinery (its supervisors, hosts, orchestrator) need no TensorFlow: `started_run`'s
`program` runs a plain program through `[training] command` instead of the built-in model (e.g.
tests/helpers/plain_trainer.py, which reports its global step through tfcluster_report: the same progress
events, so `points()`, `wait_trains` and tests/faults/measure.py read it alike).
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Collection, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import pytest

from orchestrator.run import records as runs
from testkit.sshd import Machines
from tests.faults import measure
from tests.faults.netns import NetworkCut
from tests.helpers.waiting import wait_for
from tests.integration.lifecycle_helpers import (
    cli,
    isolated_state_dir,
    run_processes,
    started_run_id,
    status_json,
)
from training.run.layout import RunLayout

BETWEEN_GRAPH = [["ps"], ["worker"], ["worker"]]  # m0: ps:0, m1: worker:0 (the chief), m2: worker:1
PACED = {"model": "mlp", "batch_size": 16, "progress_interval": 0.5, "checkpoint_every_secs": 600.0,
         "slowdown": {"worker:0": 4.0, "worker:1": 4.0}}


@dataclass
class FaultRun:
    machines: Machines
    state: Path
    run_id: str
    hosts_toml: Path
    steps: int
    label: str
    started_at: float = field(default_factory=time.time)
    marks: dict[str, float] = field(default_factory=dict)  # when a stage's fault happened, for later stages
    net: NetworkCut | None = None  # m2 behind a veth pair the test can cut (root only)
    mode: str = "between-graph"

    # --- the CLI --------------------------------------------------------------------------------
    def status(self) -> tuple[int, dict[str, Any]]:
        return status_json(self.state, self.run_id)

    def task(self, name: str, st: dict[str, Any] | None = None) -> dict[str, Any]:
        st = st if st is not None else self.status()[1]
        return next(t for t in st["tasks"] if t["name"] == name)

    def host(self, name: str, st: dict[str, Any]) -> dict[str, Any]:
        return next(h for h in st["hosts"] if h["name"] == name)

    def logs(self, lines: int = 25) -> str:
        return cli(self.state, "logs", self.run_id, "-n", str(lines)).stdout

    def restarts(self) -> dict[str, int]:
        return {t["name"]: t["restarts"] for t in self.status()[1]["tasks"]}

    @contextmanager
    def measuring(self, fault: str, column: str | None = None) -> Iterator[dict[str, Any]]:
        """measure.measuring under this run's label; `column`: the fault's column in the mode x fault
        table (benchmarks/bench_faults.py MODE_COLUMNS), with this run's mode."""
        tags = {"mode": self.mode, "column": column} if column else {}
        with measure.measuring(fault, self.label, **tags) as figures:
            yield figures

    # --- independent views ----------------------------------------------------------------------
    def run_dir(self, host: str) -> str:
        run_dir = runs.load(self.run_id).host(host).run_dir
        assert run_dir, f"{host} has no run dir"
        return run_dir

    def points(self) -> list[measure.Point]:
        return measure.progress_points([h.run_dir for h in runs.load(self.run_id).hosts if h.run_dir])

    def log_text(self, host: str, name: str) -> str:
        path = Path(self.run_dir(host), "logs", f"{name}.log")
        return path.read_text(errors="replace") if path.exists() else ""

    def processes(self) -> list[psutil.Process]:
        return run_processes(self.run_id)

    def task_pids(self, task_id_prefix: str) -> list[int]:
        """Live processes whose TFCLUSTER_TASK_ID starts with e.g. "worker-1#" (any attempt)."""
        out = []
        for p in self.processes():
            try:
                if p.environ().get("TFCLUSTER_TASK_ID", "").startswith(task_id_prefix):
                    out.append(p.pid)
            except psutil.Error:
                continue
        return out

    # --- waiting --------------------------------------------------------------------------------
    def wait_trains(self, task: str, after: float, timeout: float = 150.0, above_local: int = 0) -> measure.Point:
        """The first progress event of `task` after `after` from a process that stepped."""
        point: measure.Point = wait_for(lambda: measure.first_step_after(self.points(), after, task, above_local),
                                        timeout, f"{task} of {self.run_id} to step after t={after:.1f}", interval=0.5)
        return point

    def wait_moves(self, task: str, after: float, timeout: float = 150.0) -> measure.Point:
        """The first event of `task` after `after` showing a new step (measure.first_move_after)."""
        point: measure.Point = wait_for(lambda: measure.first_move_after(self.points(), after, task), timeout,
                                        f"{task} of {self.run_id} to take a step after t={after:.1f}", interval=0.5)
        return point

    def wait_all_train(self, timeout: float = 180.0) -> None:
        for task in ("worker:0", "worker:1"):
            self.wait_trains(task, 0.0, timeout)

    def task_states(self) -> dict[str, str]:
        """Each task's state as its supervisor last recorded it (the hosts' state files: the loopback
        machines share this filesystem), "" while it has none: a read without SSH, cheap between stages."""
        record = runs.load(self.run_id)
        states = {}
        for t in record.plan.tasks:
            path = Path(RunLayout(record.host(t.host).run_dir or "-").task_state_file(t.job, t.index))
            try:
                states[t.name] = str(json.loads(path.read_text()).get("state", ""))
            except (OSError, ValueError):
                states[t.name] = ""
        return states

    def wait_healthy(self, tasks: Collection[str] | None = None, timeout: float = 180.0) -> None:
        """A stage's precondition: every machine's sshd up, every task (or those named) running as its
        supervisor recorded it, then each of them that reports progress taking a step after now (a
        stopped or cut-off trainer does not). What a stage before left recovering (a restart, a
        reconnect) is waited for here, not failed on."""
        def running() -> bool:
            chosen = [s for name, s in self.task_states().items() if tasks is None or name in tasks]
            up = all(self.machines.is_running(i) for i in range(len(self.machines.addresses)))
            return up and bool(chosen) and all(s == "running" for s in chosen)

        what = f"{', '.join(sorted(tasks)) if tasks else 'every task'} of {self.run_id} running"
        wait_for(running, timeout, what, interval=0.2, explain=lambda: str(self.task_states()))
        now = time.time()
        trainers = {p.task for p in self.points()}
        chosen = sorted(trainers if tasks is None else trainers & set(tasks))

        def all_moved() -> bool:
            points = self.points()
            return all(measure.first_move_after(points, now, task) for task in chosen)

        wait_for(all_moved, timeout, f"{', '.join(chosen)} to step after t={now:.1f}", interval=0.2)

    def global_step(self) -> int:
        return max((p.global_step for p in self.points()), default=0)

    def assert_time_left(self, margin: int) -> int:
        """The run must still be far from its last step for the next fault to land mid-run."""
        step = self.global_step()
        assert step < self.steps - margin, (f"global step {step} of {self.steps}: the run ends before the next "
                                            "fault can be measured (raise STEPS)")
        return step


@contextmanager
def started_run(machines: Machines, tmp: Path, *, label: str, steps: int, training: dict[str, Any] | None = None,
                roles: list[list[str]] | None = None, mode: str = "between-graph",
                program: Mapping[str, Any] | None = None) -> Iterator[FaultRun]:
    """Start one run in its own state dir; at the end every run recorded there is stopped (while it has
    processes) and anything of it still alive is killed. `program`: the `[training]` table of a plain
    program (its files already in `tmp`, beside the hosts.toml: e.g. plain_trainer.plain_training(tmp)) run
    instead of the paced built-in model (`steps` is then not given to it); `training` adds to either."""
    table = {**program} if program is not None else {**PACED, "steps": steps}
    with pytest.MonkeyPatch.context() as mp, isolated_state_dir(tmp / "state", mp) as state:
        hosts = machines.hosts_toml(tmp / "hosts.toml", roles=roles or BETWEEN_GRAPH, mode=mode,
                                    training={**table, **(training or {})})
        res = cli(state, "start", str(hosts), "--timeout", "150")
        assert res.returncode == 0, res.stdout + res.stderr
        run = FaultRun(machines, state, started_run_id(res.stdout), hosts, steps, label, mode=mode)
        try:
            yield run
        finally:
            keep_evidence(run, tmp / "kept")


def keep_evidence(run: FaultRun, into: Path) -> None:
    """Each host's logs and events copied next to the test's files (a machine's own dir goes with it)."""
    for host in runs.load(run.run_id).hosts:
        for part in ("logs", "events"):
            source = Path(host.run_dir or "-", part)
            if source.is_dir():
                shutil.copytree(source, into / host.name / part, dirs_exist_ok=True)


def kill(pid: int, sig: int) -> float:
    """Send `sig` to `pid` and return the time it was sent."""
    at = time.time()
    os.kill(pid, sig)
    return at
