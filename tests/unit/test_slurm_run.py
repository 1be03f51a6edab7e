"""The pure parts of a [slurm] run (the runs themselves are in tests/integration/test_slurm_*.py, on the
real Slurm): the batch script `start` submits (a script sh reads, every value inert, nothing secret, the
supervisors' step), Slurm's end states as run states, srun's words (recorded from Slurm 22.05 here) told
apart from a command's, the record's job, the plan reached through the job, the pending lines, and what a
follower of a starting run waits for."""

from __future__ import annotations

import io
import queue
import subprocess
import threading
from pathlib import Path

import pytest
from rich.console import Console

from orchestrator.config.schema import Config
from orchestrator.config.validate import validate
from orchestrator.errors import ConfigError, HostError
from orchestrator.plan.from_file import any_plan_file, slurm_plan_file
from orchestrator.plan.sbatch import export_script
from orchestrator.plan.slurm import SlurmNode, plan_slurm
from orchestrator.run import records
from orchestrator.run.launch import host_records
from orchestrator.run.slurm_batch import start_script
from orchestrator.run.slurm_end import CANCELLED_BY_START, STOPPED, RunEnd, ended_run, placed
from orchestrator.run.slurm_job import JobFacts, parse_fields
from orchestrator.run.slurm_start import through_job
from orchestrator.transport.local import LocalTransport
from orchestrator.transport.srun import SrunTransport
from tfcluster.start_progress import StartProgress

HOSTILE_WORKDIR = "/tmp/my runs/it's $(touch pwned)"
HOSTILE_PYTHON = "/opt/py env/py`id`thon"


def job(workdir: str = HOSTILE_WORKDIR, **slurm: object) -> Config:
    return Config.model_validate({"cluster": {"name": "demo"}, "slurm": {"nodes": 2, "workers": 3, **slurm},
                                  "remote": {"python": HOSTILE_PYTHON, "workdir": workdir}})


def test_the_batch_script_holds_the_allocation_then_runs_the_supervisors_step(tmp_path: Path) -> None:
    script = start_script(plan_slurm(validate(job(time="10", gpus_per_node=2))), "demo-20250101-000000-abcd", 120.0)
    assert subprocess.run(["sh", "-n"], input=script, text=True, check=False).returncode == 0
    sbatch = [line for line in script.splitlines() if line.startswith("#SBATCH")]
    assert sbatch == ["#SBATCH --job-name=demo", "#SBATCH --nodes=2", "#SBATCH --ntasks-per-node=2",
                      "#SBATCH --time=10", "#SBATCH --gpus-per-node=2", "#SBATCH --no-requeue",
                      "#SBATCH --output=/dev/null", "#SBATCH --chdir=/"]
    step = next(line for line in script.splitlines() if line.startswith("srun "))
    assert step.startswith("srun --nodes=2 --ntasks=2 --ntasks-per-node=1 --kill-on-bad-exit=0 --gpus-per-node=2 "
                           "--job-name=tfcluster-supervisors /bin/sh -c ")
    assert "_tfcluster_training.supervisor --step" in step and 'if [ "$code" -eq 75 ]' in script
    # The values reach sh as data: the run dir and the python are read back exactly, nothing runs.
    probe = script.replace(step, 'printf "%s|%s" "$run" ' + step.split('"$run" ', 1)[1]).replace("exec >>", ": ")
    probe = probe.replace('while [ ! -e "$here/go" ]', "while false")
    read = subprocess.run(["sh", "-c", probe], capture_output=True, text=True, check=False, cwd=tmp_path,
                          env={"HOME": str(tmp_path), "SLURMD_NODENAME": "n1", "PATH": "/usr/bin:/bin"})
    assert read.stdout == f"{HOSTILE_WORKDIR}/runs/demo-20250101-000000-abcd|{HOSTILE_PYTHON}", read
    assert not (tmp_path / "pwned").exists()


def test_the_batch_script_ends_the_job_when_no_go_comes_in_time(tmp_path: Path) -> None:
    """(600 s after start's timeout; here three tenths of a second.)"""
    script = start_script(plan_slurm(validate(job("~/work"))), "r1", 0.0).replace(" -ge 6000 ", " -ge 3 ")
    res = subprocess.run(["sh", "-c", script], capture_output=True, text=True, check=False,
                         env={"HOME": str(tmp_path), "SLURMD_NODENAME": "n1", "PATH": "/usr/bin:/bin"})
    assert res.returncode == 1
    log = tmp_path / "work" / "runs" / "r1" / "n1" / "logs" / "slurm-batch.log"
    assert log.read_text() == "tfcluster: no go from tfcluster start: ending the job\n"


def record(status: records.RecordStatus = "started", reason: str = "") -> records.RunRecord:
    plan = plan_slurm(validate(job())).plan
    return records.RunRecord(run_id="r", config_path="/h.toml", cluster="demo", mode=plan.mode, created=1.0,
                             plan=plan, hosts=[], status=status, slurm=records.SlurmJob("12", reason=reason))


@pytest.mark.parametrize(("state", "reason", "status", "ours", "expected"), [
    ("RUNNING", "None", "started", "", None),
    ("COMPLETED", "None", "started", "", RunEnd("finished", "")),
    ("COMPLETED", "None", "stopped", "", RunEnd("stopped", STOPPED)),
    ("CANCELLED", "None", "started", "", RunEnd("stopped", "cancelled outside tfcluster (scancel)")),
    ("CANCELLED", "None", "stopped", "", RunEnd("stopped", "cancelled outside tfcluster (scancel)")),
    ("CANCELLED", "None", "stopped", STOPPED, RunEnd("stopped", STOPPED)),
    ("CANCELLED", "None", "failed-to-start", CANCELLED_BY_START, RunEnd("stopped", CANCELLED_BY_START)),
    ("TIMEOUT", "TimeLimit", "started", "", RunEnd("failed", "time limit")),
    ("NODE_FAIL", "NodeDown", "started", "", RunEnd("failed", "node failure (NodeDown)", lost=True)),
    ("PREEMPTED", "None", "started", "", RunEnd("failed", "preempted")),
    ("OUT_OF_MEMORY", "None", "started", "", RunEnd("failed", "out of memory")),
    ("FAILED", "NonZeroExitCode", "started", "", RunEnd("failed", "the job failed")),
    ("COMPLETING", "NodeDown", "started", "", RunEnd("partial", "ending (NodeDown)")),
    ("", "", "started", "", RunEnd("", "Slurm no longer lists job 12")),
])
def test_slurm_end_states_are_run_states_with_their_reason(state: str, reason: str, status: records.RecordStatus,
                                                           ours: str, expected: RunEnd | None) -> None:
    assert ended_run(record(status, ours), JobFacts("12", state, reason)) == expected


@pytest.mark.parametrize(("stderr", "reason"), [
    ("srun: error: Slurm job 2 has expired\nsrun: Check SLURM_JOB_ID environment variable. Expired or invalid "
     "job 2\n", "unreachable"),
    ("srun: error: Unable to confirm allocation for job 3: Job is pending execution\n", "unreachable"),
    ("srun: error: Unable to confirm allocation for job 99: Invalid job id specified\n", "unreachable"),
    ("srun: Job step aborted: Waiting up to 7 seconds for job step to finish.\nslurmstepd-n2: error: *** STEP 6.0 "
     "ON n2 CANCELLED AT 2026-12-04T20:11:53 ***\nsrun: error: n2: task 0: Terminated\n", "lost"),
])
def test_sruns_own_failures_are_host_errors(stderr: str, reason: str) -> None:
    with pytest.raises(HostError) as raised:
        SrunTransport("n2", "n2", "2", LocalTransport("here")).command_stderr(1, stderr)
    assert raised.value.reason == reason and raised.value.host == "n2"


@pytest.mark.parametrize(("code", "stderr", "own"), [
    (3, "err\nsrun: error: n2: task 0: Exited with exit code 3\n", "err\n"),
    (3, "srun: error: n2: task 0: Exited with exit code 3\n", ""),
    (143, "srun: error: n2: task 0: Terminated\n", ""),
    (0, "a warning\n", "a warning\n"),
])
def test_a_commands_own_stderr_is_kept_without_sruns_task_end_line(code: int, stderr: str, own: str) -> None:
    assert SrunTransport("n2", "n2", "2", LocalTransport("here")).command_stderr(code, stderr) == own


def test_scontrols_fields_and_the_job_as_a_line_says_it() -> None:
    fields = parse_fields("JobId=12 JobName=demo JobState=PENDING Reason=Priority Command=/x y NodeList=(null)")
    assert fields["JobState"] == "PENDING" and fields["Command"] == "/x" and "y" not in fields
    assert JobFacts("12", "PENDING", "Priority").said == "PENDING (Priority)"
    assert JobFacts("12", "RUNNING", "None").said == "RUNNING" and not JobFacts("12", "RUNNING", "None").ended
    assert JobFacts("12", "TIMEOUT", "TimeLimit").ended and JobFacts("12", "", "").ended


def test_the_record_keeps_the_job_and_the_plan_reaches_nodes_through_it() -> None:
    plan = plan_slurm(validate(job(login="login.example")), nodes=[SlurmNode("n2", "10.0.0.2"), SlurmNode("n1", "10.0.0.1")])
    reached = through_job(plan.plan, "12", "login.example")
    assert [(h.name, h.address, h.dial_address, h.transport, h.job_id, h.via) for h in reached.hosts] == [
        ("n1", "n1", "10.0.0.1", "slurm", "12", "login.example"), ("n2", "n2", "10.0.0.2", "slurm", "12", "login.example")]
    rec = record()
    rec.replace_plan(reached)
    back = records.RunRecord.from_json(rec.to_json())
    assert back.slurm == records.SlurmJob("12") and back.plan.hosts == reached.hosts
    assert "slurm" not in records.RunRecord.from_json({**rec.to_json(), "slurm": None}).to_json()


def test_start_and_plan_refuse_requeue_which_export_keeps(tmp_path: Path) -> None:
    hosts = tmp_path / "hosts.toml"
    hosts.write_text('[slurm]\nnodes = 1\nworkers = 1\nsbatch_args = ["--requeue"]\n')
    with pytest.raises(ConfigError) as refused:
        any_plan_file(hosts)
    assert refused.value.one_line().startswith(f"{hosts}:4: slurm.sbatch_args: --requeue: `tfcluster start` "
                                                "submits with --no-requeue")
    assert "#SBATCH --requeue" in export_script(slurm_plan_file(hosts), str(hosts))


def test_the_pending_job_is_one_line_per_change_without_a_terminal() -> None:
    out = io.StringIO()
    with StartProgress(Console(file=out, force_terminal=False, width=100), 2) as progress:
        progress.job("12", "PENDING (Priority)")
        progress.job("12", "RUNNING")
    assert out.getvalue().splitlines()[:2] == ["Slurm job 12: PENDING (Priority)", "Slurm job 12: RUNNING"]


def test_a_follower_waits_until_start_has_both_the_nodes_and_their_run_dirs() -> None:
    """`logs -f` or the dashboard started while the job waits must not read the hosts before `start` has
    prepared them: until then a host's run dir is not known, and a log's path would be wrong for ever (a
    fresh-clone run's `logs -f` tailed `logs/worker-0.log` under the home directory and showed nothing). Here
    `start`'s three saves come from this thread, each once the follower has said what it waits for."""
    waiting = record("starting")
    waiting.run_id = "demo-20260101-000000-abcd"
    records.save(waiting)
    said: queue.Queue[str] = queue.Queue()
    followed: list[records.RunRecord] = []
    follower = threading.Thread(target=lambda: followed.append(placed(waiting, said.put, poll=0.01)), daemon=True)
    follower.start()
    assert said.get(timeout=30) == "Slurm job 12 is pending: waiting for its nodes (Ctrl-C to leave)"
    running = records.load(waiting.run_id)
    running.replace_plan(plan_slurm(validate(job()), [SlurmNode("n1", "10.0.0.1"), SlurmNode("n2", "10.0.0.2")]).plan)
    running.hosts = host_records(running.plan)  # as start saves them on RUNNING: no run dir yet
    records.save(running)
    assert said.get(timeout=30) == (
        f"run {waiting.run_id} is starting: waiting for its hosts to be prepared (Ctrl-C to leave)")
    assert follower.is_alive()
    for host in running.hosts:
        host.run_dir = f"/home/u/work/runs/{waiting.run_id}/{host.name}"
    records.save(running)
    follower.join(timeout=30)
    assert [h.run_dir for h in followed[0].hosts] == [h.run_dir for h in running.hosts]
    assert said.empty()  # each wait said once
