"""`tfcluster resize` of a built-in run that takes a worker through a restart, over real sshd with real TensorFlow on the shared workdir
(issue 37): the run grows by one worker (m2 joins) through a restart, and loses at most the steps since its
last checkpoint. Each test waits for a checkpoint before it resizes, reads what the command said (the last
checkpoint's step, the run's step), then what the restarted trainers logged and reported:
- in-graph (ps:0 and the client chief:0 on m0, worker:0 on m1): only the client restarts; it resumes from
  the variables ps:0 still holds, so its first step after the restart is at or past every step the old
  client reported (and past the checkpoint the command named); its towers are then worker-0's and the new
  worker-1's and each step draws the two towers' batch; ps:0 and worker:0 are never restarted;
- multi-worker-mirrored (worker:0, the chief, on m0; worker:1 on m1): the whole group restarts, with three
  replicas in sync and a global batch of three workers' batches, from the chief's last checkpoint: the step
  it restores is at or past the checkpoint the command named; worker:2 trains with them.
- synchronous between-graph (ps:0 on m0, worker:0, the chief, on m1): every kept task restarts, ps:0 too
  (fresh accumulators for two replicas); the chief finds the new ps empty and restores its last checkpoint,
  at or past the one the command named; every update then takes worker:0's and the new worker:1's gradients;
- parameter-server-strategy (ps:0 and the coordinator chief:0 on m0, worker:0 on m1): every kept task
  restarts; the coordinator restores its last checkpoint (at or past the one named) and schedules steps on
  both workers, worker:1's counted by it.
All four runs end `finished` by themselves, every task exiting 0.
In-graph's client is paced by the test's own model (tests/helpers/paced_model.py: every step waits PAUSE_MS
for its batch until the test has seen the new tower, then the test ends its input, on which the client
ends as at its last step: not a bet on how long the resize took); mirrored's group by worker:0's
`slowdown` (each of its steps takes that many times its own) only until the resize, which restarts the kept group before the new host is launched: the
restarted group cannot step without worker:2, so its run cannot end before the test sees it train. The
synchronous run is paced by the test's model until the resize is done (then `end_pause`: it trains on to
its `steps`, which its replicas reach together: a synchronous run cannot end on an input's end), and the
restarted aggregation cannot update without worker:1. The coordinator is paced by worker:0's `slowdown`;
it restarts before worker:1 exists, and TF's first connection waits for every worker of its new cluster.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from orchestrator.run.local_ports import free_port_block
from testkit.sshd import Machines
from tests import requires
from tests.helpers.paced_model import PacedModel
from tests.helpers.waiting import wait_for
from tests.integration.lifecycle_helpers import cli, started_run_id, status_json

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

PAUSE_MS = 50
BATCH = 16
CHECKPOINT_EVERY = 50
IN_GRAPH_STEPS = 10**9  # never reached: the test ends the client's input once it has seen the new tower
SYNC_PAUSE_MS = 100
SYNC_STEPS = 400  # 40 s of paced steps at least: the resize is done before (about 10 s); unpaced after it
PSS_STEPS = 800  # at worker:0's slowed pace (x10) the resize comes long before; after it, worker:1 takes most steps
SAID_CHECKPOINT = re.compile(r"the last checkpoint was at step (\d+), the run is at step (\d+)")
RESIZE_NOTE = "restarted by `tfcluster resize` with the new cluster"


def test_an_in_graph_run_grows_by_one_worker_through_a_client_restart(machines: Machines, tmp_path: Path,
                                                                      state_dir: Path) -> None:
    requires.tensorflow()
    model = PacedModel(tmp_path, PAUSE_MS)
    training = model.training(batch_size=BATCH, steps=IN_GRAPH_STEPS, progress_interval=0.5,
                              checkpoint_every_steps=CHECKPOINT_EVERY, checkpoint_every_secs=600.0)
    run_id, run_dir, said = _grown(machines, tmp_path, state_dir, "in-graph", [["ps", "chief"], ["worker"]],
                                   training)
    assert "chief:0 (the in-graph client) restarts with the new cluster (2 workers)" in said, said
    checkpoint = _said_checkpoint(said)

    events = run_dir / "m0" / "events" / "chief-0.jsonl"
    wait_for(lambda: any(_tower_of(e, "worker-1") for e in _processes(events)[-1]), 180,
             "the restarted client to step with worker-1's tower", interval=0.5,
             explain=lambda: cli(state_dir, "logs", run_id, "-n", "20").stdout)
    model.end_input()  # seen: the client ends, and with it the servers it used
    st = wait_for(lambda: _ended(state_dir, run_id), 300, "the run to finish by itself")
    assert st["state"] == "finished", st
    rows = {t["name"]: t for t in st["tasks"]}
    assert set(rows) == {"ps:0", "chief:0", "worker:0", "worker:1"}
    assert all(t["exit_code"] == 0 for t in rows.values()), st["tasks"]
    assert rows["ps:0"]["restarts"] == rows["worker:0"]["restarts"] == 0, st["tasks"]  # they only serve
    assert rows["chief:0"]["restarts"] == 1 and rows["worker:1"]["restarts"] == 0, st["tasks"]  # the resize's only

    old, new = _processes(events)[-2:]
    first_after = _first_session_step(run_dir / "m0" / "logs" / "chief-0.log")
    # Nothing the old client reported is lost (the ps held it), let alone the checkpoint the command named.
    assert first_after >= max(e["global_step"] for e in old), (first_after, old[-1])
    assert first_after >= checkpoint, (first_after, checkpoint)
    assert new[0]["global_step"] >= first_after
    assert all(set(e["towers"]) == {"worker-0", "worker-1"} for e in new if e.get("towers")), new[-1]
    assert new[-1]["examples"] == new[-1]["local_step"] * BATCH * 2, new[-1]  # the big batch: two towers'
    assert max(e["global_step"] for e in new) > first_after


def test_a_mirrored_run_grows_by_one_worker_through_a_group_restart(machines: Machines, tmp_path: Path,
                                                                    state_dir: Path) -> None:
    requires.tensorflow()
    training = {"model": "mlp", "batch_size": BATCH, "steps": 1500, "progress_interval": 0.5,
                "checkpoint_every_steps": CHECKPOINT_EVERY, "checkpoint_every_secs": 600.0,
                "slowdown": {"worker:0": 3.0}}
    run_id, run_dir, said = _grown(machines, tmp_path, state_dir, "multi-worker-mirrored", [["worker"], ["worker"]],
                                   training)
    assert "worker:0, worker:1 restart as one group with the new cluster (3 workers)" in said, said
    checkpoint = _said_checkpoint(said)

    worker2 = run_dir / "m2" / "events" / "worker-2.jsonl"
    wait_for(lambda: worker2.exists() and any(e["global_step"] > checkpoint for e in _processes(worker2)[-1]), 240,
             "worker:2 to train in the group", interval=0.5,
             explain=lambda: cli(state_dir, "logs", run_id, "-n", "20").stdout)
    st = wait_for(lambda: _ended(state_dir, run_id), 300, "the run to finish by itself")
    assert st["state"] == "finished", st
    rows = {t["name"]: t for t in st["tasks"]}
    assert set(rows) == {"worker:0", "worker:1", "worker:2"}
    assert all(t["exit_code"] == 0 for t in rows.values()), st["tasks"]
    # The resize's restart only: no group restart followed it (the old group's losses announced an older epoch).
    assert [rows[n]["restarts"] for n in ("worker:0", "worker:1", "worker:2")] == [1, 1, 0], st["tasks"]

    log = (run_dir / "m0" / "logs" / "worker-0.log").read_text()
    after = log[log.index(RESIZE_NOTE):]
    assert "3 replicas in sync" in after and f"(global batch {BATCH * 3})" in after, after[-3000:]
    restored = re.search(r"restored \S+ \(global step (\d+)\)", after)
    assert restored is not None, after[-3000:]
    # The restored step is the latest checkpoint when the group restarted: at or past the one the command named.
    assert int(restored.group(1)) >= checkpoint, (restored.group(0), checkpoint)
    new = _processes(run_dir / "m0" / "events" / "worker-0.jsonl")[-1]
    assert new[0]["global_step"] > int(restored.group(1))
    assert max(e["global_step"] for e in new) >= training["steps"]


def test_a_synchronous_run_grows_by_one_worker_through_a_restart_of_every_task(machines: Machines, tmp_path: Path,
                                                                                  state_dir: Path) -> None:
    requires.tensorflow()
    model = PacedModel(tmp_path, SYNC_PAUSE_MS)
    training = model.training(batch_size=BATCH, steps=SYNC_STEPS, sync_replicas=True, progress_interval=0.5,
                              checkpoint_every_steps=CHECKPOINT_EVERY, checkpoint_every_secs=600.0)
    run_id, run_dir, said = _grown(machines, tmp_path, state_dir, "between-graph", [["ps"], ["worker"]], training,
                                   chief_host="m1")
    model.end_pause()  # the old trainers are gone: the new ones train on to SYNC_STEPS at the machine's pace
    assert ("ps:0, worker:0 restart with the new cluster (2 workers): the ps with fresh synchronous accumulators "
            "(2 of 2 replicas' gradients per update)") in said, said
    checkpoint = _said_checkpoint(said)

    st = _finished_with_every_task_exiting_0(state_dir, run_id, {"ps:0", "worker:0", "worker:1"})
    rows = {t["name"]: t for t in st["tasks"]}
    assert rows["ps:0"]["restarts"] == rows["worker:0"]["restarts"] == 1, st["tasks"]  # the resize's only
    assert rows["worker:1"]["restarts"] == 0, st["tasks"]
    log = (run_dir / "m1" / "logs" / "worker-0.log").read_text()
    after = log[log.index(RESIZE_NOTE):]
    assert "2 of 2 replicas' gradients per update" in after, after[-3000:]
    # The new ps is empty: the chief restores (at once, or when it fails over if it met the old ps first).
    assert "the parameter servers hold no initialised variables: restoring" in after, after[-3000:]
    assert _first_session_step(run_dir / "m1" / "logs" / "worker-0.log") >= checkpoint
    new = _processes(run_dir / "m2" / "events" / "worker-1.jsonl")[-1]  # in lock step with worker:0
    assert new[0]["global_step"] > checkpoint and new[-1]["global_step"] == SYNC_STEPS, (new[0], new[-1])
    assert new[-1]["local_step"] - new[0]["local_step"] == SYNC_STEPS - new[0]["global_step"], (new[0], new[-1])


def test_a_ps_strategy_run_grows_by_one_worker_through_a_restart_of_every_task(machines: Machines, tmp_path: Path,
                                                                              state_dir: Path) -> None:
    requires.tensorflow()
    training = {"model": "mlp", "batch_size": BATCH, "steps": PSS_STEPS, "progress_interval": 0.5,
                "checkpoint_every_steps": CHECKPOINT_EVERY, "checkpoint_every_secs": 600.0,
                "slowdown": {"worker:0": 10.0}}
    run_id, run_dir, said = _grown(machines, tmp_path, state_dir, "parameter-server-strategy",
                                   [["ps", "chief"], ["worker"]], training)
    assert ("chief:0, ps:0, worker:0 restart with the new cluster (2 workers): the coordinator's cluster is "
            "fixed when it starts") in said, said
    checkpoint = _said_checkpoint(said)

    st = _finished_with_every_task_exiting_0(state_dir, run_id, {"ps:0", "chief:0", "worker:0", "worker:1"})
    rows = {t["name"]: t for t in st["tasks"]}
    assert [rows[n]["restarts"] for n in ("ps:0", "chief:0", "worker:0", "worker:1")] == [1, 1, 1, 0], st["tasks"]
    log = (run_dir / "m0" / "logs" / "chief-0.log").read_text()
    after = log[log.index(RESIZE_NOTE):]
    assert "coordinator connected to 1 ps and 2 workers" in after, after[-3000:]
    restored = re.search(r"restored \S+ \(global step (\d+)\)", after)
    assert restored is not None and int(restored.group(1)) >= checkpoint, (after[-3000:], checkpoint)
    # The coordinator counts worker:1's steps where it schedules them (events on its own host, m0).
    new = _processes(run_dir / "m0" / "events" / "worker-1.jsonl")[-1]
    assert new[-1]["local_step"] > 0 and new[-1]["global_step"] > int(restored.group(1)), new[-1]


def _finished_with_every_task_exiting_0(state_dir: Path, run_id: str, names: set[str]) -> dict[str, Any]:
    st = wait_for(lambda: _ended(state_dir, run_id), 300, "the run to finish by itself",
                  explain=lambda: cli(state_dir, "logs", run_id, "-n", "20").stdout)
    assert st["state"] == "finished", st
    assert {t["name"] for t in st["tasks"]} == names, st["tasks"]
    assert all(t["exit_code"] == 0 for t in st["tasks"]), st["tasks"]
    return st


def _grown(machines: Machines, tmp_path: Path, state_dir: Path, mode: str, roles: list[list[str]],
           training: dict[str, Any], chief_host: str = "m0") -> tuple[str, Path, str]:
    """Start the run, wait for its first checkpoint (on `chief_host`), grow it by a worker on m2 (`--yes`):
    (run id, the shared run dir, what the command printed)."""
    base_port = free_port_block(4 * 3)

    def hosts(name: str, roles: list[list[str]]) -> Path:
        return machines.hosts_toml(tmp_path / name, roles=roles, mode=mode, base_port=base_port, training=training)

    res = cli(state_dir, "start", str(hosts("one.toml", roles)), "--timeout", "150")
    assert res.returncode == 0, res.stdout + res.stderr
    run_id = started_run_id(res.stdout)
    run_dir = Path(machines.workdir(0), "runs", run_id)
    checkpoint = run_dir / chief_host / "checkpoints" / "checkpoint"
    wait_for(lambda: _checkpoint_step(checkpoint) >= CHECKPOINT_EVERY, 180, "a checkpoint after training",
             interval=0.5, explain=lambda: cli(state_dir, "logs", run_id, "-n", "20").stdout)
    res = cli(state_dir, "resize", run_id, str(hosts("two.toml", [*roles, ["worker"]])), "--yes")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "host m2 joins" in res.stdout, res.stdout
    return run_id, run_dir, res.stdout


def _checkpoint_step(checkpoint: Path) -> int:
    """The step of the latest checkpoint its `checkpoint` file names (-1 before the first)."""
    m = re.search(r'model_checkpoint_path: "[^"]*-(\d+)"', checkpoint.read_text() if checkpoint.exists() else "")
    return int(m.group(1)) if m else -1


def _said_checkpoint(said: str) -> int:
    """The last checkpoint's step the command said before it acted (the run's step is at or past it)."""
    m = SAID_CHECKPOINT.search(said.replace("\n", " "))
    assert m is not None, said
    assert int(m.group(2)) >= int(m.group(1)) >= CHECKPOINT_EVERY, said
    return int(m.group(1))


def _processes(events: Path) -> list[list[dict[str, Any]]]:
    """The task's progress events, one list per process (a new process counts its local steps from 1 again)."""
    out: list[list[dict[str, Any]]] = [[]]
    for line in events.read_text().splitlines() if events.exists() else []:
        e = json.loads(line)
        if e.get("kind", "progress") != "progress":
            continue
        if out[-1] and e["local_step"] < out[-1][-1]["local_step"]:
            out.append([])
        out[-1].append(e)
    return out


def _tower_of(event: dict[str, Any], tower: str) -> bool:
    return tower in (event.get("towers") or {})


def _first_session_step(log: Path) -> int:
    """The global step the client's session started at, after the resize restarted it."""
    text = log.read_text()
    m = re.search(r"session ready at global step (\d+)", text[text.index(RESIZE_NOTE):])
    assert m is not None, text[-3000:]
    return int(m.group(1))


def _ended(state_dir: Path, run_id: str) -> dict[str, Any]:
    """`status --json` once the run has ended (empty, falsy, until then)."""
    _, st = status_json(state_dir, run_id)
    return st if st["state"] in ("finished", "failed", "stopped") else {}
