"""`start` of a [slurm] run: submit the job, wait for its nodes, then the usual two phases through the job.

1. Plan in node indexes (orchestrator.plan.slurm: every rule checked, nothing submitted for a file that
   cannot run), make the record, then `sbatch --parsable` of the batch script (orchestrator.run.
   slurm_batch) on this machine or on `[slurm] login` over [ssh]. The record gets the job id at once, so a
   `stop` from another terminal finds the job even if this process dies while it waits.
2. Wait: `scontrol show job` every `poll` seconds; each change of state or reason is reported
   (`PENDING (Priority)`). A reason that never clears by itself (NEVER_CLEARS: the job asks for what the
   partition, account or QOS cannot give) cancels the job and fails the start: one line, exit 2.
3. On RUNNING: its nodes and their NodeAddr (`scontrol show node`) give the real plan (`plan_slurm` with
   the nodes), every host reached through the job (transport "slurm": orchestrator.transport.srun). Before
   the record names them (so before `logs -f` or the dashboard can reach in), the job's first step runs here,
   `srun --immediate`, tried again every few seconds: Slurm refuses a job's first step while one of its
   nodes is flagged not responding (a loaded slurmd that answered one RPC late), and a plain srun then
   waits 60-69 s before asking again, silently, or fails ("Duplicate job id") once the node answers
   (benchmarks/results/slurm_first_step.md: 61-65 s against 2.5 s this way). Later steps are not refused
   that way.
4. launch.start_hosts: one conversation per node, each a step of the job; at `go` each node's launcher
   hands over to the supervisor the job's own step starts (training/supervisor/handover.py), the batch
   node's first writing the `go` the batch script waits for, and readiness comes back as on SSH hosts.
Any failure or Ctrl-C after the submission cancels the job and waits until Slurm has released it (after
start_hosts' own rollback, which stops what was launched, verified).
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable

from orchestrator.config.load import read_config, with_line, with_mode
from orchestrator.config.modes import Mode
from orchestrator.config.schema import Config
from orchestrator.config.validate import validate
from orchestrator.errors import ConfigError, HostError, TfclusterError, UsageError
from orchestrator.plan.model import ClusterPlan
from orchestrator.plan.slurm import SlurmNode, SlurmPlan, plan_slurm
from orchestrator.run import records
from orchestrator.run.launch import (
    StartInterrupted,
    StartOptions,
    StartResult,
    forwarded_env,
    host_records,
    new_record,
    start_hosts,
)
from orchestrator.run.ship import file_sets
from orchestrator.run.slurm_batch import start_script
from orchestrator.run.slurm_end import CANCELLED_BY_START, cancel
from orchestrator.run.slurm_job import SHELL_NAME, JobFacts, SlurmClient
from orchestrator.run.start_host import ProgressFn
from orchestrator.transport.factory import slurm_shell

POLL_S = 0.5
# Pending reasons Slurm never clears by itself: the request exceeds what the partition, account or QOS allow.
NEVER_CLEARS = ("BadConstraints", "PartitionConfig", "PartitionNodeLimit", "PartitionTimeLimit", "InvalidAccount",
                "InvalidQOS", "AccountNotAllowed", "QOSNotAllowed")
JobProgressFn = Callable[[str, str], None]  # (job id, "PENDING (Priority)"): each change while it waits


class SlurmRefused(TfclusterError):
    """Slurm will never run the job as written (sbatch refused it, or a pending reason that never clears):
    it was cancelled; nothing started (exit 2, like other input that cannot run)."""

    exit_code = 2


def through_job(plan: ClusterPlan, job_id: str, via: str) -> ClusterPlan:
    """The allocated plan with every node reached through the job's steps."""
    hosts = tuple(dataclasses.replace(h, transport="slurm", job_id=job_id, via=via) for h in plan.hosts)
    return dataclasses.replace(plan, hosts=hosts)


def start_slurm(config_path: str, options: StartOptions | None = None, progress: ProgressFn | None = None,
                on_job: JobProgressFn | None = None, *, mode: Mode | None = None, poll: float = POLL_S) -> StartResult:
    """Submit and start the [slurm] job of hosts.toml at `config_path` (optionally in another mode; see the
    module docstring)."""
    config, text = read_config(config_path)
    return start_job(with_mode(config, mode), config_path, text, options, progress, on_job, poll=poll)


def start_job(config: Config, config_path: str, text: str, options: StartOptions | None = None,
              progress: ProgressFn | None = None, on_job: JobProgressFn | None = None, *,
              poll: float = POLL_S) -> StartResult:
    """`start_slurm` of a Config already read from `config_path` (whose `text` gives errors their line; a
    bench cell's is the file's, changed where the cell says)."""
    options = options or StartOptions()
    t0 = time.monotonic()
    if options.allow_partial:
        raise UsageError("start --allow-partial: a Slurm job's supervisors are one step, on all its nodes or none")

    def planned(nodes: list[SlurmNode] | None) -> SlurmPlan:
        try:
            return plan_slurm(validate(config, config_path), nodes)
        except ConfigError as exc:
            raise with_line(exc, text) from None

    job = planned(None)
    files = file_sets(job.plan.training.sync, os.path.dirname(os.path.abspath(config_path)), config_path)
    forward_env = forwarded_env(job.plan, config_path)
    record = new_record(job.plan, config_path, options)
    login = job.slurm.login or ""
    client = SlurmClient(slurm_shell(login or "slurm", login, job.plan.hosts[0].ssh, job.plan.hosts[0].login_shell))
    try:
        try:
            job_id = client.submit(start_script(job, record.run_id, options.timeout), list(forward_env))
        except TfclusterError as exc:
            _failed(record, exc.one_line())
            raise SlurmRefused(exc.one_line()) from None
        record.slurm = records.SlurmJob(job_id, submit_host=login, state="PENDING")
        records.save(record)
        try:
            report = on_job or (lambda job_id, said: None)
            facts = _wait_running(client, job_id, report, poll)
            nodes = client.nodes(facts.node_list)
            make_first_step(client, job_id, len(nodes), report, options.timeout, poll)
            plan = through_job(planned(nodes).plan, job_id, login)
            record.replace_plan(plan)
            record.hosts = host_records(plan)
            record.slurm.state = "RUNNING"
            records.save(record)
            hand_over = ["--hand-over", "--forwarded", ",".join(sorted(forward_env))]  # names only, never values
            head_extra: dict[str, dict[str, object]] = {
                h.name: {"launch": [*hand_over, *(["--go"] if h.name == facts.batch_host else [])]} for h in plan.hosts}
            return start_hosts(record, files, forward_env, options, progress, t0=t0, head_extra=head_extra)
        except BaseException as exc:
            if _stopped_elsewhere(record.run_id):  # `tfcluster stop` from another terminal: its record stands
                raise StartInterrupted(f"run {record.run_id} was stopped (tfcluster stop) while it started") from None
            said = cancel(record, CANCELLED_BY_START)
            interrupted = isinstance(exc, KeyboardInterrupt | StartInterrupted)
            if record.status == "starting":
                _failed(record, "start interrupted by the user" if interrupted else str(exc),
                        status="interrupted" if interrupted else "failed-to-start")
            if interrupted:
                why = str(exc) if isinstance(exc, StartInterrupted) else "interrupted: start cancelled"
                raise StartInterrupted(f"{why}; {said}") from None
            if isinstance(exc, HostError):
                raise HostError(exc.host, exc.reason, f"{exc.detail}; {said}") from None
            raise
    finally:
        client.close()


def _wait_running(client: SlurmClient, job_id: str, on_job: JobProgressFn, poll: float) -> JobFacts:
    said = ""
    while True:
        facts = client.job(job_id)
        if facts.said != said:
            said = facts.said
            on_job(job_id, said)
        if facts.state == "RUNNING" and facts.node_list and facts.batch_host:
            return facts
        if facts.ended:
            raise SlurmRefused(f"Slurm job {job_id} ended before it ran: {facts.said or 'unknown to Slurm'}")
        if facts.state == "PENDING" and facts.reason in NEVER_CLEARS:
            raise SlurmRefused(f"Slurm job {job_id} cannot run as written: pending with reason {facts.reason} "
                               "(the partition, account or QOS does not allow what [slurm] asks); it was cancelled")
        time.sleep(poll)


def make_first_step(client: SlurmClient, job_id: str, nodes: int, on_job: JobProgressFn, timeout: float,
                    poll: float) -> None:
    """The job's first step, made here before any other (see the module docstring, 3): tried again every
    ASK_S + `poll` s while Slurm cannot start it yet, each new reason reported; HostError after `timeout`."""
    deadline = time.monotonic() + timeout
    said = ""
    while why := client.first_step(job_id, nodes):
        if why != said:
            said = why
            on_job(job_id, f"RUNNING, no step can start yet ({why})")
        if time.monotonic() > deadline:
            raise HostError(SHELL_NAME, "unreachable",
                            f"Slurm job {job_id} runs, but no step could start on its nodes in {timeout:g}s: {why}")
        if client.job(job_id).ended:
            raise SlurmRefused(f"Slurm job {job_id} ended before any step could start on its nodes: {why}")
        time.sleep(poll)


def _stopped_elsewhere(run_id: str) -> bool:
    try:
        return records.load(run_id).status in ("stopped", "purged")
    except UsageError:
        return True  # `stop --purge` removed the record


def _failed(record: records.RunRecord, note: str, status: records.RecordStatus = "failed-to-start") -> None:
    record.status = status
    record.notes.append(note)
    records.save(record)
