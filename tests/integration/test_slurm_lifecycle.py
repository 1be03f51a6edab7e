"""A [slurm] run's life on the real three-node Slurm (testkit/slurm.py), through the CLI. Each mode with the
built-in model and real TensorFlow runs to `finished` through `start --wait`, its trainers' live rates seen
in `dash --once --json` while it trains, its job COMPLETED and nothing of it left, the job id in `ls`. `stop`
ends the tasks, verifies, cancels the job and leaves no process and no job. A job Slurm ends
(`scancel` from outside, its node set DOWN, its time limit) becomes the run's state with Slurm's reason in
`status`, and `start --wait` exits accordingly (1 stopped or failed, 3 lost). `logs -f` started while the
job waits follows its tasks once it runs, and follows on after Slurm ended it. Those runs are a plain program
(what is under test is the job's end), one task on a node pinned by sbatch_args, so that a node set DOWN
takes only its own run. The time-limited run starts with the module's first test, so that its minute
(Slurm's least) passes while the others run; the last test waits for its end.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from orchestrator.run import records as records_api
from orchestrator.transport.factory import transport_for
from testkit.slurm import SlurmCluster
from tests import requires
from tests.helpers.output import OutputLines
from tests.helpers.waiting import wait_for
from tests.integration.lifecycle_helpers import (
    cli,
    cli_process,
    dash_json,
    kill_run,
    records,
    status_json,
    until_rates,
)
from tests.integration.slurm_helpers import (
    assert_nothing_left,
    job_of,
    run_id_of,
    running,
    settled,
    slurm_env,
)

pytestmark = pytest.mark.integration
requires.tensorflow()
__all__ = ["slurm_env"]  # the module's fixture: the CLI talks to the test cluster

LOOP = "import time\nfor i in range(10**6):\n    print(f'step {i}', flush=True)\n    time.sleep(0.2)\n"


def one_node_run(cluster: SlurmCluster, where: Path, node: str, **slurm: object) -> Path:
    """A [slurm] file for LOOP, one task on `node`."""
    (where / "loop.py").write_text(LOOP)
    return cluster.hosts_toml(
        where / "hosts.toml", mode="multi-worker-mirrored",
        slurm={"nodes": 1, "workers": 1, "sbatch_args": [f"--nodelist={node}"], **slurm},
        training={"command": "{python} loop.py", "sync": ["loop.py"], "progress_pattern": r"step (?P<step>\d+)"})


def back_in_service(cluster: SlurmCluster, node: str) -> bool:
    """Resume a node that is DOWN; True once Slurm says it is IDLE."""
    state = cluster.node(node).get("State", "")
    if "DOWN" in state:
        cluster.run("scontrol", "update", f"NodeName={node}", "State=RESUME")
    return state == "IDLE"


def ended(state_dir: Path, run_id: str) -> dict[str, Any]:
    st = status_json(state_dir, run_id)[1]
    assert st["slurm"]["job_id"], st
    return st


@pytest.fixture(scope="module")
def time_limited(slurm_env: None, slurm_cluster: SlurmCluster,
                 tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, subprocess.Popen[str]]]:
    """`start --wait` of a run with a one-minute time limit (Slurm's least) on n1, started by this module's
    first test so that its minute passes while the others run; the last test waits for its end."""
    where = tmp_path_factory.mktemp("timed")
    state = where / "state"
    with cli_process(state, "start", "--wait", str(one_node_run(slurm_cluster, where, "n1", time="1"))) as start:
        try:
            yield state, start
        finally:
            for record in records(state):
                cli(state, "stop", record["run_id"], "--grace", "1")
                kill_run(record["run_id"])


def test_stop_ends_the_tasks_then_the_job_and_leaves_nothing(
        slurm_cluster: SlurmCluster, tmp_path: Path, state_dir: Path,
        time_limited: tuple[Path, subprocess.Popen[str]]) -> None:
    res = cli(state_dir, "start", str(one_node_run(slurm_cluster, tmp_path, "n2")))
    assert res.returncode == 0, res.stderr[-2000:]
    run_id, job = run_id_of(state_dir), job_of(state_dir)
    node = transport_for(records_api.load(run_id).plan.hosts[0])  # a step of the job on n2, as every command
    try:
        failed = node.run(["sh", "-c", "echo oops >&2; exit 3"], timeout=30)
        assert (failed.exit_code, failed.stderr) == (3, "oops\n")  # the command's words, without srun's
        sent = node.run_shell(f"cat > {tmp_path / 'copied'}", timeout=30, stdin=b"through the job\n")
        assert sent.ok and (tmp_path / "copied").read_text() == "through the job\n"  # stdin reaches the step
    finally:
        node.close()
    res = cli(state_dir, "stop", run_id)
    assert res.returncode == 0, (res.stdout, res.stderr)
    assert f"Slurm job {job} cancelled and gone from squeue" in res.stdout, res.stdout
    assert_nothing_left(slurm_cluster, run_id, job)
    st = ended(state_dir, run_id)
    assert st["state"] == "stopped" and st["slurm"] == {"job_id": job, "state": "CANCELLED",
                                                        "reason": "stopped by tfcluster"}, st
    assert f"{job} CANCELLED: stopped by tfcluster" in cli(state_dir, "ls").stdout


def test_a_job_slurm_can_never_run_is_cancelled_and_refused(slurm_cluster: SlurmCluster, tmp_path: Path,
                                                            state_dir: Path) -> None:
    """Four nodes from a partition of three: Slurm keeps it pending for ever, with reason PartitionNodeLimit
    or PartitionConfig (slurmctld gives either, depending on which of its checks sees the job first)."""
    hosts = slurm_cluster.hosts_toml(tmp_path / "hosts.toml", slurm={"nodes": 4, "workers": 4},
                                     mode="multi-worker-mirrored", training={"command": "{python} -c pass"})
    res = cli(state_dir, "start", str(hosts))
    assert res.returncode == 2, res.stderr
    job = job_of(state_dir)
    assert res.stderr.strip().splitlines()[-1] in {
        f"error: Slurm job {job} cannot run as written: pending with reason {reason} (the partition, "
        "account or QOS does not allow what [slurm] asks); it was cancelled"
        for reason in ("PartitionNodeLimit", "PartitionConfig")}, res.stderr
    assert records(state_dir)[0]["status"] == "failed-to-start"
    assert slurm_cluster.run("squeue", "-h", "-j", job).stdout.strip() == ""


@contextmanager
def start_waiting_for_n2(cluster: SlurmCluster, tmp_path: Path, state_dir: Path
                         ) -> Iterator[tuple[subprocess.Popen[str], str, str]]:
    """`start` (no --wait) of a run on n2 while another job holds n2 exclusively: (the start, its job, the
    holder's job) once Slurm keeps the run's job pending for Resources. The holder is cancelled at the end,
    and gone before the next test, which may want n2."""
    (tmp_path / "hold.sh").write_text("#!/bin/sh\nsleep 120\n")
    holder = cluster.submit(tmp_path / "hold.sh", "--nodelist=n2", "--exclusive", "--output=/dev/null")
    try:
        wait_for(lambda: cluster.job(holder).get("JobState") == "RUNNING", 60, "the holder to hold n2",
                 explain=lambda: cluster.explain(holder))
        with cli_process(state_dir, "start", str(one_node_run(cluster, tmp_path, "n2"))) as start:
            job = job_of(state_dir)
            wait_for(lambda: cluster.job(job).get("Reason") == "Resources", 30, "the job to wait for n2")
            yield start, job, holder
    finally:
        cluster.run("scancel", holder)
        cluster.wait_job(holder, 60)


def test_ctrl_c_while_the_job_waits_cancels_it(slurm_cluster: SlurmCluster, tmp_path: Path, state_dir: Path) -> None:
    with start_waiting_for_n2(slurm_cluster, tmp_path, state_dir) as (start, job, _holder):
        os.kill(start.pid, signal.SIGINT)
        _out, err = start.communicate(timeout=60)
    assert start.returncode == 130, err[-2000:]
    assert f"interrupted: start cancelled; Slurm job {job} cancelled and gone from squeue" in err, err[-2000:]
    assert records(state_dir)[0]["status"] == "interrupted" and records(state_dir)[0]["slurm"]["state"] == "CANCELLED"
    assert slurm_cluster.run("squeue", "-h", "-j", job).stdout.strip() == ""


def test_logs_f_started_while_the_job_waits_follows_its_tasks_once_it_runs(slurm_cluster: SlurmCluster,
                                                                           tmp_path: Path, state_dir: Path) -> None:
    """`status` and `logs` while the job waits say it is pending; `logs -f` says so once, waits for `start` to
    record the job's nodes and then streams the task's lines."""
    with start_waiting_for_n2(slurm_cluster, tmp_path, state_dir) as (start, job, holder):
        run_id = run_id_of(state_dir)
        code, st = status_json(state_dir, run_id)
        assert (code, st["state"], st["slurm"]["state"]) == (0, "pending", "PENDING"), st
        assert cli(state_dir, "logs", run_id).stdout == (
            f"-- run {run_id}: its Slurm job is pending: no task has run, no log\n")
        start_err = OutputLines(start.stderr)
        with cli_process(state_dir, "logs", "-f", run_id) as follow:
            out, follow_err = OutputLines(follow.stdout), OutputLines(follow.stderr)
            out.expect(f"-- Slurm job {job} is pending: waiting for its nodes (Ctrl-C to leave)")
            assert slurm_cluster.run("scancel", holder).returncode == 0

            def explain() -> str:  # where the time went, if the lines never come
                record = records(state_dir)[0]
                return (f"start (running: {start.poll() is None}) said {start_err.so_far()[-15:]}\n"
                        f"logs -f said on stderr {follow_err.so_far()[-15:]}\n"
                        f"record: {record['status']}, hosts {[h['name'] for h in record['plan']['hosts']]}\n"
                        f"{slurm_cluster.explain(job, holder)}")
            out.expect("worker:0@n2 step ", 3, timeout=60, explain=explain)
        assert start.wait(timeout=60) == 0, start_err.so_far()
    assert cli(state_dir, "stop", run_id).returncode == 0
    assert_nothing_left(slurm_cluster, run_id, job)


def test_scancel_from_outside_stops_the_run(slurm_cluster: SlurmCluster, tmp_path: Path, state_dir: Path) -> None:
    """`scancel` from outside: `start --wait` exits 1 with Slurm's reason, the run is `stopped`, nothing is
    left; `logs -f`, following the task through the job, follows its log on after the job ended (read where
    the job was submitted, as `status` reads the run then), as it does for an SSH run."""
    with cli_process(state_dir, "start", "--wait", str(one_node_run(slurm_cluster, tmp_path, "n2"))) as start:
        job = job_of(state_dir)
        wait_for(lambda: running(state_dir), 60, "the run to start", interval=0.2)
        with cli_process(state_dir, "logs", "-f", run_id_of(state_dir)) as follow:
            out = OutputLines(follow.stdout)
            out.expect("worker:0@n2 step ", 3)
            assert slurm_cluster.run("scancel", job).returncode == 0
            _out, err = start.communicate(timeout=60)
            log = Path(records_api.load(run_id_of(state_dir)).host("n2").run_dir, "logs", "worker-0.log")
            wait_for(lambda: not slurm_cluster.job_processes(job), 30, f"every process of job {job} gone")
            with log.open("a") as f:  # shown once `logs -f` has reconnected: it resumes after the last line shown
                f.write("a line written after the job\n")
            out.expect("worker:0@n2 a line written after the job", timeout=60)
    assert start.returncode == 1, err[-2000:]
    assert f"(Slurm job {job}: CANCELLED: cancelled outside tfcluster (scancel))" in err, err[-2000:]
    st = ended(state_dir, run_id_of(state_dir))
    assert st["state"] == "stopped" and st["slurm"]["reason"] == "cancelled outside tfcluster (scancel)", st
    assert_nothing_left(slurm_cluster, run_id_of(state_dir), job)


def test_a_node_set_down_loses_its_tasks(slurm_cluster: SlurmCluster, tmp_path: Path, state_dir: Path) -> None:
    with cli_process(state_dir, "start", "--wait", str(one_node_run(slurm_cluster, tmp_path, "n3"))) as start:
        job = job_of(state_dir)
        wait_for(lambda: running(state_dir), 60, "the run to start", interval=0.2)
        try:
            down = slurm_cluster.run("scontrol", "update", "NodeName=n3", "State=DOWN", "Reason=tfcluster-test")
            assert down.returncode == 0, down.stderr
            _out, err = start.communicate(timeout=60)
        finally:
            wait_for(lambda: back_in_service(slurm_cluster, "n3"), 60, "n3 idle again", interval=0.5)
    assert start.returncode == 3, err[-2000:]  # lost: Slurm ended its tasks with the node
    st = ended(state_dir, run_id_of(state_dir))
    assert st["state"] == "failed" and st["slurm"]["state"] == "NODE_FAIL", st
    assert st["slurm"]["reason"] == "node failure (NodeDown)" and [t["state"] for t in st["tasks"]] == ["lost"], st
    assert_nothing_left(slurm_cluster, run_id_of(state_dir), job)


# Every trainer paced (a step then sleeps 3x its own time): the run lasts as long at a quarter of the CPU.
TRAINING = {"model": "mlp", "batch_size": 32, "progress_interval": 0.5, "checkpoint_every_secs": 3600.0,
            "slowdown": {"worker:0": 4.0, "worker:1": 4.0}}
# (mode, [slurm] counts, steps, the trainers whose live rate the dashboard shows): as few nodes and tasks as
# show the mode working, and steps enough that the rates are seen while it trains.
MODES = [
    ("in-graph", {"nodes": 3, "workers": 2}, 250, {"chief:0"}),  # at its slowest tower's pace: fewer steps
    ("multi-worker-mirrored", {"nodes": 2, "workers": 2}, 400, {"worker:0", "worker:1"}),
    # Its coordinator keeps 8 steps in flight: even paced, 400 steps took ~20 s, and under load (4 busy loops)
    # 1500 steps with one worker slowed 2x took 18 s, over before the dashboard's slowed reads saw both
    # rates (the run's logs showed both workers stepping). Both paced, 1500 steps last about a minute.
    ("parameter-server-strategy", {"nodes": 3, "workers": 2}, 1500, {"worker:0", "worker:1"}),
]


def finished(cluster: SlurmCluster, state_dir: Path, run_id: str) -> dict[str, Any]:
    code, st = settled(state_dir, run_id)
    assert code == 0 and st["state"] == "finished", st
    assert st["slurm"]["state"] == "COMPLETED", st["slurm"]
    assert all(t["state"] == "exited" and not t["failed"] for t in st["tasks"]), st["tasks"]
    assert_nothing_left(cluster, run_id, st["slurm"]["job_id"])
    return st


def test_between_graph_shows_every_workers_rate_and_finishes(slurm_cluster: SlurmCluster, tmp_path: Path,
                                                              state_dir: Path) -> None:
    hosts = slurm_cluster.hosts_toml(tmp_path / "hosts.toml", slurm={"nodes": 3, "workers": 2},
                                     training={**TRAINING, "steps": 800})
    with cli_process(state_dir, "start", "--wait", str(hosts)) as start:
        wait_for(lambda: running(state_dir), 120, "the run to start", interval=0.5)
        run_id = run_id_of(state_dir)
        steps = slurm_cluster.run("squeue", "-h", "-s", "-o", "%j %N").stdout.split("\n")
        assert "tfcluster-supervisors n[1-3]" in steps, steps  # one step, on every node
        tasks = until_rates(state_dir, run_id, {"worker:0", "worker:1"})
        assert {tasks[n]["host"] for n in ("worker:0", "worker:1")} == {"n2", "n3"}  # ps:0 on n1, as the resolver
        _out, err = start.communicate(timeout=180)
    assert start.returncode == 0, err[-3000:]
    assert "Slurm job" in err and "RUNNING" in err  # its state while start waited, one line per change
    st = finished(slurm_cluster, state_dir, run_id)
    listed = cli(state_dir, "ls").stdout
    assert f"{st['slurm']['job_id']} COMPLETED" in listed, listed


@pytest.mark.parametrize(("mode", "counts", "steps", "trainers"), MODES, ids=[m[0] for m in MODES])
def test_each_mode_runs_to_finished_with_live_rates(slurm_cluster: SlurmCluster, tmp_path: Path, state_dir: Path,
                                                    mode: str, counts: dict[str, int], steps: int,
                                                    trainers: set[str]) -> None:
    hosts = slurm_cluster.hosts_toml(tmp_path / "hosts.toml", slurm=counts, mode=mode,
                                     training={**TRAINING, "steps": steps})
    with cli_process(state_dir, "start", "--wait", str(hosts)) as start:
        wait_for(lambda: running(state_dir), 120, "the run to start", interval=0.5)
        until_rates(state_dir, run_id_of(state_dir), trainers)
        _out, err = start.communicate(timeout=240)
    assert start.returncode == 0, err[-3000:]
    finished(slurm_cluster, state_dir, run_id_of(state_dir))


def test_a_bench_cell_runs_through_the_same_start_and_stop(slurm_cluster: SlurmCluster, tmp_path: Path,
                                                          state_dir: Path) -> None:
    hosts = slurm_cluster.hosts_toml(tmp_path / "hosts.toml", slurm={"nodes": 3, "workers": 2}, training=TRAINING)
    out = tmp_path / "report"
    res = cli(state_dir, "bench", str(hosts), "--modes", "between-graph", "--workers", "2", "--seconds", "3",
              "--warmup", "1", "--out", str(out), timeout=240)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-3000:]
    (cell,) = json.loads((out / "bench.json").read_text())["cells"]
    assert cell["status"] == "ok" and cell["stopped_clean"] is True, cell.get("error")
    assert set(cell["figures"]["per_worker_steps_per_s"]) == {"worker:0", "worker:1"}
    job = records(state_dir)[0]["slurm"]["job_id"]
    assert_nothing_left(slurm_cluster, cell["run_id"], job)


def test_a_time_limit_fails_the_run(slurm_cluster: SlurmCluster,
                                    time_limited: tuple[Path, subprocess.Popen[str]]) -> None:
    state, start = time_limited
    _out, err = start.communicate(timeout=150)
    assert start.returncode == 1, err[-2000:]
    run_id = run_id_of(state)
    st = ended(state, run_id)
    assert st["state"] == "failed" and st["slurm"]["state"] == "TIMEOUT" and st["slurm"]["reason"] == "time limit", st
    assert "(Slurm job" in err and "TIMEOUT: time limit)" in err, err[-2000:]
    dash = dash_json(state, run_id)  # the dashboard says so too, from the run dirs read where it was submitted
    job = st["slurm"]["job_id"]
    assert dash["state"] == "failed" and f"Slurm job {job} TIMEOUT: time limit" in [e["text"] for e in dash["log"]]
    assert_nothing_left(slurm_cluster, run_id, st["slurm"]["job_id"])
