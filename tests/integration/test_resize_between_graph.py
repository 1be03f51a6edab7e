"""`tfcluster resize` of a built-in asynchronous between-graph run, over real sshd with real TensorFlow on the
shared workdir (issue 37): ps:0 on m0, worker:0 (the chief) on m1, m2 joins. One TensorFlow run, in stages:
- grow 1 -> 2 worker hosts: worker:1 joins the running cluster through ClusterSpec propagation (its log says
  so) and its steps appear in `dash --once --json`; the cluster's examples/s rises above worker:0's alone;
- shrink back: worker:1's row goes, worker:0 trains on;
- nobody else ever restarted (the same pids, `restarts` 0 in `status --json`), and the run ends `finished`
  by itself: ps:0 took the shrunk plan's finishers from its run.json (worker:1 never sent a done token);
- worker:0's own progress events: its global step never stood still longer than one liveness window
  (monitor/views.py: STALE_INTERVALS x the status interval) from its first event to its last, both resizes
  included.
The model is the test's own (tests/helpers/paced_model.py, run by the built-in between-graph trainer like
mlp): every step waits PAUSE_MS for its batch on the worker, so each worker steps at most 1000 / PAUSE_MS
times a second whatever the machine, and worker:1, which no `slowdown` may name before it exists (a resize keeps
`[training]`), is paced like worker:0; once the test has seen what it waits for, it ends the input
(`PacedModel.end_input`: the end of data, on which the trainer ends as at its last step). The run's end is
the test's event, not a bet on how long the resizes take: STEPS is never reached.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from orchestrator.monitor.views import STALE_INTERVALS
from orchestrator.run.local_ports import free_port_block
from testkit.sshd import Machines
from tests import requires
from tests.helpers.paced_model import PacedModel
from tests.helpers.waiting import wait_for
from tests.integration.lifecycle_helpers import cli, dash_json, started_run_id, status_json

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

PAUSE_MS = 100
STEPS = 10**9  # never reached: the test ends the input. At most 10 steps/s a worker while paced: CPU to spare
# on a loaded machine, both workers keep pace, so the rise is seen
TRAINING = {"batch_size": 16, "steps": STEPS, "progress_interval": 0.5, "checkpoint_every_secs": 600.0}
RISE = 1.3  # two workers of the same pace: about twice one's examples/s


def test_grow_and_shrink_a_running_async_between_graph_run(machines: Machines, tmp_path: Path,
                                                           state_dir: Path) -> None:
    requires.tensorflow()
    base_port = free_port_block(4 * 3)
    model = PacedModel(tmp_path, PAUSE_MS)

    def hosts(name: str, roles: list[list[str]]) -> Path:
        return machines.hosts_toml(tmp_path / name, roles=roles, base_port=base_port, training=model.training(**TRAINING))

    one = hosts("one.toml", [["ps"], ["worker"]])
    res = cli(state_dir, "start", str(one), "--timeout", "120")
    assert res.returncode == 0, res.stdout + res.stderr
    run_id = started_run_id(res.stdout)
    run_dir = Path(machines.workdir(0), "runs", run_id)
    dash = _dash_until(state_dir, run_id, lambda d: _training(d, {"worker:0"}), 120, "worker:0 to train")
    solo = dash["totals"]["examples_per_s"]
    before = _rows(state_dir, run_id)
    assert set(before) == {"ps:0", "worker:0"}

    res = cli(state_dir, "resize", run_id, str(hosts("two.toml", [["ps"], ["worker"], ["worker"]])))
    assert res.returncode == 0, res.stdout + res.stderr
    assert "host m2 joins" in res.stdout and "worker:1 starts on m2" in res.stdout
    _dash_until(state_dir, run_id, lambda d: _training(d, {"worker:0", "worker:1"})
                and d["totals"]["examples_per_s"] > RISE * solo, 120,
                f"worker:1 to train and the cluster's examples/s to rise above {RISE} x {solo}")
    assert "joins the resized cluster" in (run_dir / "m2" / "logs" / "worker-1.log").read_text()
    assert _same(before, _rows(state_dir, run_id))

    res = cli(state_dir, "resize", run_id, str(one))
    assert res.returncode == 0, res.stdout + res.stderr
    assert "worker:1 on m2 is stopped" in res.stdout and "host m2 leaves" in res.stdout
    shrunk = _dash_until(state_dir, run_id, lambda d: {t["name"] for t in d["tasks"]} == {"ps:0", "worker:0"}
                         and _training(d, {"worker:0"}), 60, "worker:0 to train on alone")

    model.end_input()  # worker:0's input ends: it ends training, and ps:0 with it once worker:0 is done
    st = wait_for(lambda: _ended(state_dir, run_id), 400, "the run to finish by itself")
    assert st["state"] == "finished", st
    assert {t["name"] for t in st["tasks"]} == {"ps:0", "worker:0"}
    assert all(t["exit_code"] == 0 and t["restarts"] == 0 for t in st["tasks"]), st["tasks"]
    ps_log = (run_dir / "m0" / "logs" / "ps-0.log").read_text()
    assert "No worker known" not in ps_log and "waiting for worker:0, worker:1" in ps_log, ps_log[-3000:]
    assert "waiting for worker:0\n" in ps_log and "every finisher is done" in ps_log, ps_log[-3000:]
    events = [json.loads(line) for line in (run_dir / "m1" / "events" / "worker-0.jsonl").read_text().splitlines()]
    assert max(e["global_step"] for e in events) >= shrunk["totals"]["global_step"]
    window = STALE_INTERVALS * float(st["interval_s"])
    assert _longest_stand_still(events) <= window, (_longest_stand_still(events), window)


def _dash_until(state_dir: Path, run_id: str, ok: Callable[[dict[str, Any]], bool], timeout: float,
                what: str) -> dict[str, Any]:
    last: dict[str, Any] = {}

    def seen() -> dict[str, Any]:  # empty (falsy) until it holds
        last.clear()
        last.update(dash_json(state_dir, run_id))
        return dict(last) if ok(last) else {}

    def explain() -> str:
        tasks = "; ".join(f"{t['name']} {t['state']} steps/s {t['steps_per_s']}" for t in last.get("tasks", []))
        return f"last seen: {tasks}; totals {last.get('totals')}\n{cli(state_dir, 'logs', run_id, '-n', '15').stdout}"

    return wait_for(seen, timeout, what, interval=1.0, explain=explain)


def _training(dash: dict[str, Any], names: set[str]) -> bool:
    tasks = {t["name"]: t for t in dash["tasks"]}
    return all(n in tasks and tasks[n]["state"] == "running" and (tasks[n]["steps_per_s"] or 0) > 0 for n in names)


def _rows(state_dir: Path, run_id: str) -> dict[str, dict[str, Any]]:
    _, st = status_json(state_dir, run_id)
    return {t["name"]: t for t in st["tasks"]}


def _same(before: dict[str, dict[str, Any]], now: dict[str, dict[str, Any]]) -> bool:
    """Every task of `before` is still its first process: the same pid, never restarted."""
    return all(now[n]["pid"] == t["pid"] and now[n]["restarts"] == 0 for n, t in before.items())


def _ended(state_dir: Path, run_id: str) -> dict[str, Any]:
    """`status --json` once the run has ended (empty, falsy, until then)."""
    _, st = status_json(state_dir, run_id)
    return st if st["state"] in ("finished", "failed", "stopped") else {}


def _longest_stand_still(events: list[dict[str, Any]]) -> float:
    """The longest time between two of the task's progress events where the global step moved."""
    moved = [e["t"] for prev, e in itertools.pairwise(events) if e["global_step"] > prev["global_step"]]
    times = [events[0]["t"], *moved]
    return max((b - a for a, b in itertools.pairwise(times)), default=0.0)
