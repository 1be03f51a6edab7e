"""Faults inside one live between-graph run (ps:0 on m0, worker:0 = the chief on m1, worker:1 on m2; real
sshd on 3 loopback machines, real TensorFlow, the built-in between-graph trainer with the test's paced model,
tests/helpers/paced_model.py), one stage per test, in file order, each
starting from a healthy run and restoring what it broke (tests/faults/cluster.py), so each fails alone:
a worker SIGKILLed, the chief SIGKILLed, then SIGTERMed, the chief's checkpoint disk full, m2's network cut
and restored (root only: a network namespace), the PS SIGKILLed; then the run must finish by itself with
nothing left running: the last stage ends the trainers' input (the end of data, as a user's dataset ends),
so the run is as long as its stages take, however loaded the machine. (The faults of tfcluster's own
machinery, which need no TensorFlow: a second run on the same ports, a worker SIGSTOPped past the liveness window, an sshd stopped and started, the dashboard
SIGKILLed, are stages of tests/faults/test_host_faults.py's plain run.)

What holds across the whole run (checked by the last test): the global step never goes back except
across the PS fault, and then at most to the last checkpoint; `status` says `finished` and exits 0;
no process of the run is left on any host.

The full disk: as root (CI) the chief's checkpoint_dir is a small tmpfs the test fills to the last
byte; without root it is a directory made read-only (a write error of another kind, said in the
record).
"""

from __future__ import annotations

import contextlib
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from testkit.sshd import Machines
from tests import requires
from tests.faults import measure, netns
from tests.faults.cluster import FaultRun, kill, started_run
from tests.faults.probes import (
    AS_ROOT,
    checkpoint_dir,
    checkpoint_disk,
    fill,
    running_again,
)
from tests.helpers.paced_model import PacedModel
from tests.helpers.waiting import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.faults]
requires.tensorflow()

RUN = "between-graph"
STEPS = 10**9  # never reached: the last stage ends the input
PAUSE_MS = 20  # each worker's step: at most 50 steps/s, so a checkpoint (below) every few seconds
CHECKPOINT_EVERY = 300


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> PacedModel:
    return PacedModel(tmp_path_factory.mktemp("faults-bg"), PAUSE_MS)


@pytest.fixture(scope="module")
def run(sshd_machines: Callable[[int], Machines], model: PacedModel) -> Iterator[FaultRun]:
    tmp = model.directory  # the hosts file's, which `sync` ships the model from
    with contextlib.ExitStack() as stack:  # closed in reverse: the run stopped first, the namespace last
        net = None if netns.unavailable() else stack.enter_context(netns.NetworkCut.created())
        machines = stack.enter_context(netns.netns_machines(net)) if net else sshd_machines(3)
        ckpt = stack.enter_context(checkpoint_disk(tmp / "ckpt"))
        fr = stack.enter_context(started_run(
            machines, tmp, label=RUN, steps=STEPS,
            training=model.training(slowdown={}, checkpoint_dir=str(ckpt), checkpoint_every_steps=CHECKPOINT_EVERY,
                                    max_restarts=8)))
        fr.net = net
        fr.wait_all_train()
        yield fr


def test_worker_sigkill_is_restarted_and_loses_nothing(run: FaultRun) -> None:
    """SIGKILL of worker:1 (not the chief): its supervisor starts it again, it rejoins at the PS's global
    step (no step lost, the chief never stopped), and no other task restarts."""
    run.wait_healthy()
    with run.measuring("SIGKILL worker:1", column=measure.WORKER_KILL) as m:
        before = run.restarts()
        at = kill(run.task("worker:1")["pid"], signal.SIGKILL)
        back = run.wait_trains("worker:1", at)
        points = run.points()
        m.update(steps_lost=measure.steps_lost(points, at), recover_s=round(back.t - at, 1))
        assert m["steps_lost"] <= measure.JITTER, points
        assert measure.first_step_after(points, at, "worker:0") is not None  # the chief went on
        after = run.restarts()
        assert after == {**before, "worker:1": before["worker:1"] + 1}, (before, after)


def _chief_rejoins(run: FaultRun, sig: signal.Signals, column: str) -> tuple[list[measure.Point], float]:
    """`sig` to the chief (worker:0) of a healthy run; it trains again and the global step never went back
    more than measure.JITTER. The run's points and the moment of the fault."""
    run.wait_healthy()
    with run.measuring(f"{sig.name} chief (worker:0)", column=column) as m:
        at = kill(run.task("worker:0")["pid"], sig)
        back = run.wait_trains("worker:0", at)
        points = run.points()
        m.update(steps_lost=measure.steps_lost(points, at), recover_s=round(back.t - at, 1),
                 step_at_fault=measure.step_before(points, at))
        assert m["steps_lost"] <= measure.JITTER, [p for p in points if p.t > at][:10]
    return points, at


def test_chief_sigkill_never_rolls_the_cluster_back(run: FaultRun) -> None:
    """SIGKILL of the chief (worker:0): the new chief finds the PS still holding its variables and joins
    them as they are: the global step never goes back (issue 14 #2); worker:1 never stopped."""
    points, at = _chief_rejoins(run, signal.SIGKILL, measure.CHIEF_KILL)
    assert measure.first_step_after(points, at, "worker:1") is not None


def test_chief_sigterm_loses_nothing_either(run: FaultRun) -> None:
    """SIGTERM of the chief (a restart asked for: the dashboard's `r`): its supervisor starts it again and,
    as after a SIGKILL, the new chief joins the PS as they are: nothing lost."""
    _chief_rejoins(run, signal.SIGTERM, measure.CHIEF_TERM)


def test_full_checkpoint_disk_is_a_clear_error_and_the_last_checkpoint_loads(run: FaultRun) -> None:
    """The chief's checkpoint filesystem fills up: the chief fails with a clear error (its log says no
    space is left on the device; `status` counts its restart), the last checkpoint still loads, and once space is freed the chief's
    restart trains on from the PS's global step (nothing lost)."""
    how = "tmpfs filled" if AS_ROOT else "read-only dir (no root for a tmpfs)"
    run.wait_healthy()
    with run.measuring(f"chief's checkpoint disk full ({how})") as m:
        ckpt = checkpoint_dir(run)
        wait_for(lambda: measure.checkpoint_step(ckpt), 60, "a first checkpoint")
        before_restarts = run.restarts()["worker:0"]
        filler = fill(ckpt)
        at = time.time()
        try:
            def failed() -> dict[str, Any] | None:
                t = run.task("worker:0")
                return t if t["restarts"] > before_restarts else None

            task = wait_for(failed, 120, "the chief to fail on the full disk", interval=1.0)
            m["status_said"] = f"{task['state']}, restarts {task['restarts']}, error {task['error']}"
            m["error_seen_s"] = round(time.time() - at, 1)
            log = run.log_text("m1", "worker-0")
            error = "No space left on device" if AS_ROOT else "Permission denied"
            assert error in log, log[-3000:]
            loadable = measure.checkpoint_step(ckpt)  # reads every tensor's index: a torn checkpoint fails here
            m["last_checkpoint_step"] = loadable
            assert loadable is not None
        finally:
            freed_at = time.time()
            if AS_ROOT:
                filler.unlink(missing_ok=True)
            else:
                Path(ckpt).chmod(0o700)
        back = run.wait_trains("worker:0", freed_at)
        m["recover_s"] = round(back.t - freed_at, 1)
        m["steps_lost"] = measure.steps_lost(run.points(), at)
        assert m["steps_lost"] <= measure.JITTER


def test_network_cut_of_one_host_then_restored(run: FaultRun) -> None:
    """m2's network cut as a pulled cable does (its veth link down: no reset, packets just stop), then
    restored: while cut, `status` says m2's task is `unreachable` and exits 3 and the chief trains on;
    once restored `status` exits 0 again and worker:1 trains again (recover_s: to its 20th step); nothing
    went back. (m2 lives in a
    network namespace joined by a veth pair, tests/faults/netns.py: root only, the one stage skipped
    without it.)"""
    if run.net is None:
        pytest.skip(f"no network namespace: {netns.unavailable()}")
    run.wait_healthy()
    net = run.net
    with run.measuring("network of m2 cut (veth down), then restored") as m:
        at = time.time()
        net.cut()
        try:
            code, st = run.status()
            m["status_exit_during"] = code
            assert code == 3, st
            assert run.task("worker:1", st)["state"] == "unreachable", st
            assert run.task("worker:0", st)["state"] == "running", st
            # The cut lasts until the chief took 100 global steps more (a condition, not a fixed wait):
            # past TCP's first retransmissions. (A 26 s cut left worker:1 stuck ~85 s after the restore,
            # probably TensorFlow's gRPC channels backing off their reconnects: results commit 2694197.)
            cut_step = measure.step_before(run.points(), at)
            wait_for(lambda: any(p.task == "worker:0" and p.t > at and p.global_step >= cut_step + 100
                                 for p in run.points()), 90, "the chief to take 100 steps during the cut")
        finally:
            back_at = time.time()
            net.restore()
        m["cut_s"] = round(back_at - at, 1)
        wait_for(lambda: run.status()[0] == 0 or None, 90, "status to exit 0 again", interval=0.5)
        m["status_recover_s"] = round(time.time() - back_at, 1)
        moved = run.wait_moves("worker:1", back_at)
        m["first_step_s"] = round(moved.t - back_at, 1)
        # Recovered: it goes on training (20 steps of its own), not just one step.
        back = run.wait_trains("worker:1", moved.t - 0.001, above_local=moved.local_step + 19)
        m["recover_s"] = round(back.t - back_at, 1)
        m["worker1_restarts"] = run.restarts()["worker:1"]
        m["steps_lost"] = measure.steps_lost(run.points(), at)
        assert m["steps_lost"] <= measure.JITTER


def test_ps_sigkill_rolls_back_at_most_to_the_last_checkpoint(run: FaultRun) -> None:
    """SIGKILL of ps:0: its supervisor starts it again, empty; the chief restores the latest checkpoint
    into it and both workers resume from there: the global step goes back, but never below the last
    checkpoint written before the fault."""
    run.wait_healthy()
    with run.measuring("SIGKILL ps:0", column=measure.PS_KILL) as m:
        ckpt = checkpoint_dir(run)
        saved: int = wait_for(lambda: measure.checkpoint_step(ckpt), 120, "a checkpoint to fall back to")
        at = run.marks["ps:0 SIGKILL"] = kill(run.task("ps:0")["pid"], signal.SIGKILL)
        ps_back = wait_for(lambda: running_again(run, "ps:0", at), 120, "ps:0 started again by its supervisor")
        # Recovered: both workers stepped again in the new PS's lifetime.
        back = [run.wait_moves(task, ps_back) for task in ("worker:0", "worker:1")]
        points = run.points()
        lowest = measure.lowest_after(points, at)
        m.update(step_at_fault=measure.step_before(points, at), checkpoint_step=saved, lowest_after=lowest,
                 steps_lost=measure.steps_lost(points, at), recover_s=round(max(p.t for p in back) - at, 1),
                 resumed_at=[p.global_step for p in back])
        assert lowest is not None and lowest >= saved, m


def test_run_finishes_with_nothing_left(run: FaultRun, model: PacedModel) -> None:
    """After every fault above, the trainers' input ends: the run ends by itself, `status` says finished
    and exits 0, every task exited 0 (or was a server the run ended), the global step went back only across the PS fault (never,
    when that stage did not kill the PS), and no process of the run is left on any host.

    This stage cannot be independent of the others: what it checks is the whole run's history, so a
    stage that broke the run for good (not only its own assertions) fails it too."""
    with run.measuring("run end after all faults") as m:
        model.end_input()
        def finished() -> dict[str, Any] | None:
            code, st = run.status()
            assert st["state"] not in ("failed", "stopped"), run.logs()
            return {"code": code, "st": st} if st["state"] == "finished" else None

        end = wait_for(finished, 300, "the run to finish", interval=2.0)
        assert end["code"] == 0, end
        assert all(t["exit_code"] == 0 or t["stopped_by"] == "run" for t in end["st"]["tasks"]), end
        wait_for(lambda: not run.processes(), 30, "every process of the run to exit")
        m["processes_left"] = len(run.processes())
        m["run_s"] = round(time.time() - run.started_at, 1)
        m["global_step"] = run.global_step()
        ps_fault = run.marks.get("ps:0 SIGKILL")
        went_back = measure.drops(run.points())
        m["went_back"] = sorted({(task, high, min(low for _t, k, h, low in went_back if (k, h) == (task, high)))
                                 for _t, task, high, _low in went_back})
        assert all(ps_fault is not None and t > ps_fault for t, *_ in went_back), (ps_fault, went_back)

