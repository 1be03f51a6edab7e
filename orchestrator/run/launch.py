"""`start`: turn a plan into running processes on every host, in parallel, in two phases.

1. prepare (every host at once): connect, create the run dir, ship the code by content hash, write
   run.json; each host's command then waits at the barrier;
2. only if every host is prepared (or `allow_partial`): tell each host to go, which launches its
   supervisor detached; the supervisor pushes its tasks' states back over the same command until every
   task reports `running`.
Each host's whole start is ONE remote command (orchestrator.run.start_host, training/launcher.py).
A failure in phase 1 therefore starts nothing anywhere; a failure in phase 2 (or Ctrl-C at any point)
stops what was started before the error is raised. The run record is saved before anything runs on a
host, so `status`/`stop` find the run even if this process dies half-way. Beyond what one process
handles well, the hosts are spread over worker processes (run.start_shards), with the same phases.

No UI here: progress is reported through a callback `(host, phase, done, total)`.
"""

from __future__ import annotations

import os
import secrets
import socket
import time
from dataclasses import dataclass, field
from typing import Any

from orchestrator.config.validate import check_forward_env
from orchestrator.errors import HostError, Reason, TfclusterError, UsageError
from orchestrator.plan.model import ClusterPlan
from orchestrator.run import records
from orchestrator.run.port_check import PortsTaken, offer_count, plan_base, ports_to_try, refusal, replan
from orchestrator.run.run_file import RunFiles
from orchestrator.run.ship import FileSets, file_sets
from orchestrator.run.start_host import HostOutcome, ProgressFn, StartContext, StartShard
from orchestrator.run.start_shards import ShardedStart
from orchestrator.run.stop import HostStop, stop_hosts
from orchestrator.transport.factory import Opener, transport_for
from orchestrator.transport.shards import shard_count

PHASES = ("connect", "prepare", "ship", "launch", "wait", "running", "failed", "cancelled")
__all__ = ["PHASES", "HostOutcome", "ProgressFn", "StartFailed", "StartInterrupted", "StartOptions", "StartResult",
           "start"]


class StartInterrupted(TfclusterError):
    """Ctrl-C during start: what was started has been stopped again."""

    exit_code = 130


class StartFailed(HostError):
    """The start failed (nothing of it is left running, or the line says where it could not verify that):
    the first host's error, naming every other one; `reasons` has every failed host's own reason (not
    `cancelled`), from which the CLI tells an unreachable host from a failure (tfcluster/exit_codes.py)."""

    def __init__(self, error: HostError, detail: str, reasons: tuple[Reason, ...]) -> None:
        super().__init__(error.host, error.reason, detail)
        self.reasons = reasons or (error.reason,)


@dataclass
class StartOptions:
    timeout: float = 120.0  # the whole start, every host, until every task is running
    op_timeout: float = 30.0  # one remote step (a host's prepare)
    allow_partial: bool = False
    run_name: str | None = None
    supervisor: dict[str, float] = field(default_factory=dict)  # backoff_initial, backoff_max, grace, poll
    stop_grace: float = 10.0
    auto_ports: bool = False  # ports taken on a host: pick free ones instead of refusing (run.port_check)


@dataclass
class StartResult:
    record: records.RunRecord
    outcomes: dict[str, HostOutcome]
    seconds: float


def _note_outcomes(record: records.RunRecord, outcomes: dict[str, HostOutcome]) -> None:
    """What the hosts said into the record (run dirs, supervisor pids), saved."""
    for host in record.hosts:
        out = outcomes[host.name]
        host.run_dir = out.run_dir or host.run_dir
        host.supervisor_pid = out.supervisor_pid or host.supervisor_pid
    records.save(record)


def _first_error(outcomes: dict[str, HostOutcome], names: list[str]) -> HostError | None:
    """The root cause: a host's own error rather than another host's `cancelled`."""
    errors = [outcomes[n].error for n in names if outcomes[n].error is not None]
    real = [e for e in errors if e is not None and e.reason != "cancelled"]
    return (real or errors or [None])[0]


def _other_errors(outcomes: dict[str, HostOutcome], names: list[str], first: HostError) -> str:
    """Every other host's own error (not `cancelled`), hosts with the same one named together:
    `; also m3, m4: prepare: ...; m7: refused`. The one-line error then names EVERY bad host."""
    by_what: dict[str, list[str]] = {}
    for n in names:
        e = outcomes[n].error
        if e is not None and e.reason != "cancelled" and n != first.host:
            by_what.setdefault(f"{e.reason}: {e.detail}" if e.detail else e.reason, []).append(n)
    same = by_what.pop(f"{first.reason}: {first.detail}" if first.detail else first.reason, [])
    parts = [f"{', '.join(same)}: the same"] if same else []
    parts += [f"{', '.join(hosts)}: {what}" for what, hosts in by_what.items()]
    return f"; also {'; '.join(parts)}" if parts else ""


def forwarded_env(plan: ClusterPlan, config_path: str) -> dict[str, str]:
    """`[training] forward_env`: the values from this process's environment, for the start conversation
    only (never in the plan, the run record or any file on a host). Validation refused a name that is not
    set; a plan built otherwise is held to the same check here."""
    check_forward_env(plan.training.forward_env, config_path)
    return {name: os.environ[name] for name in plan.training.forward_env}


def start(
    plan: ClusterPlan,
    config_path: str,
    options: StartOptions | None = None,
    progress: ProgressFn | None = None,
    opener: Opener = transport_for,
) -> StartResult:
    """Start `plan` (orchestrator.plan.from_file.plan_file of `config_path`, whose directory the
    user's `[training] sync` paths are relative to)."""
    options = options or StartOptions()
    t0 = time.monotonic()
    files = file_sets(plan.training.sync, os.path.dirname(os.path.abspath(config_path)), config_path)
    forward_env = forwarded_env(plan, config_path)  # before the record: a missing variable starts nothing
    record = new_record(plan, config_path, options)
    return start_hosts(record, files, forward_env, options, progress, opener, t0=t0)


def new_record(plan: ClusterPlan, config_path: str, options: StartOptions) -> records.RunRecord:
    """The run's record, saved (status `starting`) before anything runs anywhere."""
    run_id = records.new_run_id(plan.cluster_name, options.run_name)
    records.writable_state_dir()  # a run that could not be recorded never starts: checked before any host
    if records.exists(run_id):
        raise UsageError(f"run {run_id!r} already exists (stop/purge it or pick another --run name)")
    record = records.RunRecord(
        run_id=run_id, config_path=os.path.abspath(config_path), cluster=plan.cluster_name, mode=plan.mode,
        created=time.time(), plan=plan, hosts=host_records(plan), start_pid=os.getpid(),
        start_machine=socket.gethostname(),
    )
    records.save(record)
    return record


def host_records(plan: ClusterPlan) -> list[records.HostRecord]:
    return [records.HostRecord(name=h.name, workdir=h.workdir, python=h.python) for h in plan.hosts]


def start_hosts(record: records.RunRecord, files: FileSets, forward_env: dict[str, str], options: StartOptions,
                progress: ProgressFn | None = None, opener: Opener = transport_for, *, t0: float,
                head_extra: dict[str, dict[str, object]] | None = None) -> StartResult:
    """Prepare every host of the record's plan, then launch them all (the two phases above); on a failure or
    Ctrl-C, stop what was launched. `head_extra`: more fields of a host's head frame (a Slurm run's
    hand-over, orchestrator.run.slurm_start)."""
    plan, run_id = record.plan, record.run_id
    # The supervisors sign their peer messages with a key of the run's own (training/supervisor/peers.py):
    # in the hosts' run.json (0600) only, never in the local record.
    run_data: dict[str, Any] = {"run_id": run_id, "created": record.created,
                                "supervisor": {"grace": options.stop_grace, **options.supervisor},
                                "channel_key": secrets.token_hex(32)}
    ctx = StartContext(
        run_id=run_id, run_file=RunFiles(run_data, plan, record.plan_json).for_host, files=files,
        op_timeout=options.op_timeout, timeout=options.timeout,
        deadline=time.monotonic() + options.timeout, allow_partial=options.allow_partial,
        progress=progress or (lambda host, phase, done, total: None),
        host_ports=ports_to_try(plan), free_from=plan_base(plan),
        free_count=offer_count(plan) if options.auto_ports else 0, forward_env=forward_env,
        head_extra=head_extra or {},
    )
    hosts = list(plan.hosts)
    names = [h.name for h in hosts]
    by_name = {h.name: h for h in record.hosts}
    shards = shard_count(len(hosts))
    runner: StartShard | ShardedStart = (StartShard(ctx, hosts, opener) if shards == 1
                                         else ShardedStart(ctx, hosts, opener, shards))
    # The record is saved at phase boundaries, not per host: it holds the whole plan, so per-host saves
    # would cost O(hosts^2). Crash safety needs only that `started` is on disk before any launch.
    try:
        try:
            try:
                runner.prepare()
            finally:
                _note_outcomes(record, runner.outcomes)  # run dirs, so a later stop --purge finds them
            prepared = [n for n in names if runner.outcomes[n].error is None]
            _ports_free_or_replanned(record, runner, run_data, prepared, auto=options.auto_ports)
            if len(prepared) == len(names) or (options.allow_partial and prepared):
                for name in prepared:
                    by_name[name].started = True  # stop must visit it, even if we die mid-launch
                records.save(record)
                try:  # the start's timeout is for the tasks: the time files took to arrive is added
                    runner.launch(prepared, extend=max((runner.outcomes[n].ship_s for n in prepared), default=0.0))
                finally:
                    _note_outcomes(record, runner.outcomes)  # supervisor pids
            else:
                runner.release()
        except KeyboardInterrupt:
            runner.release()
            rollback = _roll_back(record, options, opener)
            record.status = "interrupted"
            record.notes.append("start interrupted by the user")
            records.save(record)
            raise StartInterrupted("interrupted: start cancelled; " + rollback) from None
    finally:
        ctx.cancel.set()  # whatever ended the start (a second Ctrl-C mid-rollback too): no host thread waits on to its deadline
        runner.close()
    outcomes = runner.outcomes
    failed = [n for n in names if outcomes[n].error is not None]
    if failed and not (options.allow_partial and len(failed) < len(names)):
        _fail(record, outcomes, failed, options, opener)
    record.status = "partial" if failed else "started"
    for name in failed:
        record.notes.append(f"not started: {outcomes[name].error}")
    records.save(record)
    return StartResult(record=record, outcomes=outcomes, seconds=time.monotonic() - t0)


def _fail(record: records.RunRecord, outcomes: dict[str, HostOutcome], failed: list[str], options: StartOptions,
          opener: Opener) -> None:
    """Roll back what was started and raise the one-line error naming every host that failed."""
    error = _first_error(outcomes, failed)
    assert error is not None
    rollback = _roll_back(record, options, opener)
    record.status = "failed-to-start"
    record.notes.append(error.one_line())
    records.save(record)
    also = _other_errors(outcomes, failed, error)
    reasons = tuple(e.reason for n in failed if (e := outcomes[n].error) is not None and e.reason != "cancelled")
    raise StartFailed(error, f"{error.detail or 'failed'}{also} ({rollback})", reasons)


def _ports_free_or_replanned(record: records.RunRecord, runner: StartShard | ShardedStart, run_data: dict[str, Any],
                             prepared: list[str], *, auto: bool) -> None:
    """At the barrier, where nothing runs yet: refuse the start when a host said a port of the plan is
    taken there (every host is released), or with `--auto-ports` re-plan every port from the free ones
    the hosts offered; each host then gets its new run.json with its `go`."""
    taken = {n: runner.outcomes[n].taken for n in prepared if runner.outcomes[n].taken}
    if not taken:
        return
    try:
        if not auto:
            raise refusal(taken)
        record.replace_plan(replan(record.plan, {n: runner.outcomes[n].free for n in prepared}))
    except PortsTaken as refused:
        runner.release()  # every host removes the run dir it made: nothing of the run is left
        record.status = "failed-to-start"
        record.notes.append(str(refused))
        records.save(record)
        raise
    record.notes.append("ports re-planned (--auto-ports): some planned ports were in use")
    records.save(record)
    runner.replan(RunFiles(run_data, record.plan, record.plan_json).for_host)


def _roll_back(record: records.RunRecord, options: StartOptions, opener: Opener) -> str:
    """Stop the run on every host where its supervisor was (maybe) launched, and say what the stop's
    own verification saw: a rollback never claims a host is clean without having looked."""
    started = [h.name for h in record.hosts if h.started]
    if not started:
        return "nothing was started"
    result = stop_hosts(record, started, grace=min(options.stop_grace, 5.0), timeout=options.op_timeout,
                        opener=opener)
    clean = [name for name in started if result.get(name, HostStop(name, ok=False)).ok]
    unverified = [name for name in started if name not in clean]
    if not unverified:
        record.status = "stopped"
    records.save(record)
    said = f"stopped what was started on {', '.join(clean)}, verified: nothing of it is left running" if clean else ""
    if unverified:
        why = "; ".join(f"{n}: {result[n].error or 'processes left'}" if n in result else f"{n}: not reached"
                        for n in unverified)
        said += ("; " if said else "") + f"COULD NOT VERIFY the stop on {', '.join(unverified)} ({why}): " \
            f"run `tfcluster stop {record.run_id}`"
    return said
