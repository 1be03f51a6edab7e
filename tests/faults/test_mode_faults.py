"""What each replication mode loses on each fault (issue 21 point 6): one live run per mode (in-graph,
multi-worker-mirrored, parameter-server-strategy; between-graph is tests/faults/test_between_graph_faults.py),
real sshd on loopback machines, real TensorFlow, the built-in `mlp`, paced. In file order per mode: a worker
SIGKILLed (multi-worker-mirrored: its whole group restarts, and resumes from its checkpoint), the chief
SIGTERMed (a restart asked for: the dashboard's `r`), the chief SIGKILLed, a ps SIGKILLed (not in
multi-worker-mirrored: it has none); then `tfcluster stop` leaves nothing. Each fault waits first for every
task running and training (tests/faults/cluster.py wait_healthy): a stage that failed leaves the next one a
recovered run, not its own failure.

Each fault is measured from the trainers' own progress events (tests/faults/measure.py): steps lost = the
highest global step before it minus the lowest after it, and seconds until the run is past the step it was at,
once the victim runs again (its supervisor's events say when). Each is tagged with its mode and column: `make
faults` writes the mode x fault table (testkit/fault_table.py) that the README's fault table states the rules
of. What must hold (EXPECT): `none`: at most measure.JITTER steps lost; `checkpoint`: never below the last
checkpoint written before the fault. Every fault: the run recovers by itself.

Chiefs: in-graph's client chief:0 (m1), multi-worker-mirrored's worker:0 (m0), parameter-server-strategy's
coordinator chief:0 (m1). A new coordinator cannot join the variables its predecessor made on the live ps
tasks (TF2's are that coordinator's own): it restores the last checkpoint, which it writes on SIGTERM before
exiting (training/tf2/coordinator_loop.py).
"""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from testkit.sshd import Machines
from tests import requires
from tests.faults import measure
from tests.faults.cluster import FaultRun, kill, started_run
from tests.faults.probes import checkpoint_dir, running_again
from tests.helpers.waiting import wait_for
from tests.integration.lifecycle_helpers import cli

pytestmark = [pytest.mark.integration, pytest.mark.faults]
requires.tensorflow()

STEPS = 100_000  # never reached: the run is stopped after its faults
CHECKPOINT_EVERY = 300
SETUPS: dict[str, dict[str, Any]] = {
    "in-graph": {"roles": [["ps"], ["worker"], ["worker"]], "chief": "chief:0"},
    # Paced as the others (its first step, the traced one, is not: training/tf2/mirrored.py); a checkpoint
    # every 100 of its slower steps, so that the first fault does not wait long for one.
    "multi-worker-mirrored": {"roles": [["worker"], ["worker"]], "chief": "worker:0",
                              "training": {"checkpoint_every_steps": 100}},
    "parameter-server-strategy": {"roles": [["ps"], ["chief", "worker"], ["worker"]], "chief": "chief:0"},
}
EXPECT = {
    "in-graph": {measure.WORKER_KILL: "none", measure.CHIEF_TERM: "none", measure.CHIEF_KILL: "none",
                 measure.PS_KILL: "checkpoint"},
    "multi-worker-mirrored": {measure.WORKER_KILL: "checkpoint", measure.CHIEF_TERM: "checkpoint",
                              measure.CHIEF_KILL: "checkpoint"},
    "parameter-server-strategy": {measure.WORKER_KILL: "none", measure.CHIEF_TERM: "none",
                                  measure.CHIEF_KILL: "checkpoint", measure.PS_KILL: "checkpoint"},
}


@pytest.fixture(scope="module", params=list(SETUPS))
def run(request: pytest.FixtureRequest, sshd_machines: Callable[[int], Machines],
        tmp_path_factory: pytest.TempPathFactory) -> Iterator[FaultRun]:
    mode: str = request.param
    setup = SETUPS[mode]
    machines = sshd_machines(len(setup["roles"]))
    tmp = tmp_path_factory.mktemp(f"faults-{mode}")
    with started_run(machines, tmp, label=mode, steps=STEPS, roles=setup["roles"], mode=mode,
                     training={"checkpoint_dir": str(tmp / "ckpt"), "checkpoint_every_steps": CHECKPOINT_EVERY,
                               "max_restarts": 8, "progress_interval": 0.5, **setup.get("training", {})}) as fr:
        wait_for(lambda: fr.global_step() > 0, 180, f"{mode} to train")
        yield fr


def _fault(run: FaultRun, column: str, victim: str, sig: signal.Signals) -> None:
    """`sig` to `victim` once every task runs and trains and a checkpoint exists (whatever the stage before
    left); then wait until the run is past the step it was at."""
    run.wait_healthy()
    with run.measuring(f"{sig.name} {victim}", column=column) as m:
        ckpt = checkpoint_dir(run)
        wait_for(lambda: measure.checkpoint_step(ckpt), 180, "a checkpoint")
        before = run.global_step()
        wait_for(lambda: run.global_step() > before, 120, "the run to step")  # trains now, not recovering
        at = kill(run.task(victim)["pid"], sig)
        saved = measure.checkpoint_step(ckpt)  # at the fault: one finished a moment before counts too
        step_at = wait_for(lambda: measure.step_before(run.points(), at) or None, 30, "the step at the fault")
        # Recovered: the victim runs again (a new process) and, after that, the run is past the step it was
        # at (a report written late by a process that had not yet noticed the fault says nothing).
        again = wait_for(lambda: running_again(run, victim, at), 120, f"{victim} started again by its supervisor",
                         explain=run.logs)
        past = wait_for(lambda: next((p for p in run.points() if p.t > again and p.global_step > step_at), None),
                        300, f"the run past step {step_at} again", interval=0.5)
        points = run.points()
        m.update(step_at_fault=step_at, lowest_after=measure.lowest_after(points, at),
                 steps_lost=measure.steps_lost(points, at), recover_s=round(past.t - at, 1))
        if EXPECT[run.mode][column] == "none":
            assert m["steps_lost"] <= measure.JITTER, m
        else:
            m["checkpoint_step"] = saved  # what it may fall back to (the table shows it beside the loss)
            assert saved is not None and m["lowest_after"] is not None and m["lowest_after"] >= saved, m


def test_worker_sigkill(run: FaultRun) -> None:
    before = run.restarts()
    _fault(run, measure.WORKER_KILL, "worker:1", signal.SIGKILL)
    if run.mode == "multi-worker-mirrored":  # the whole group restarts, and resumes from its checkpoint
        assert run.restarts()["worker:0"] > before["worker:0"], run.restarts()
        events = [json.loads(line) for line in
                  Path(run.run_dir("m0"), "events", "supervisor-m0.jsonl").read_text().splitlines()]
        assert any(e["state"] == "restarting" and e.get("restart_reason") == "group" for e in events)
        log = run.log_text("m0", "worker-0").lower()
        assert "restored" in log or "restoring" in log or "resum" in log, log[-3000:]


def test_chief_sigterm(run: FaultRun) -> None:
    _fault(run, measure.CHIEF_TERM, SETUPS[run.mode]["chief"], signal.SIGTERM)
    code, st = run.status()
    assert st["state"] == "running" and code == 0, st  # a restart asked for, not the run's end


def test_chief_sigkill(run: FaultRun) -> None:
    _fault(run, measure.CHIEF_KILL, SETUPS[run.mode]["chief"], signal.SIGKILL)


def test_ps_sigkill(run: FaultRun) -> None:
    if run.mode == "multi-worker-mirrored":  # all-reduce between the workers: no ps to kill (the table: n/a)
        assert not [t for t in run.status()[1]["tasks"] if t["job"] == "ps"]
        return
    _fault(run, measure.PS_KILL, "ps:0", signal.SIGKILL)


def test_stop_leaves_nothing(run: FaultRun) -> None:
    with run.measuring(f"{run.mode}: stop after its faults") as m:
        res = cli(run.state, "stop", run.run_id, "--grace", "5")
        assert res.returncode == 0, res.stdout + res.stderr
        wait_for(lambda: not run.processes(), 30, "every process of the run to exit")
        m["processes_left"] = len(run.processes())
        m["run_s"] = round(time.time() - run.started_at, 1)
