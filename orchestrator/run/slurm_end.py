"""A Slurm run's job, seen from a run's later commands: is it running, and if Slurm ended it, how (the run's
state, Slurm's reason). `status` (and through it `start --wait`'s follower and `ls`) and `stop` ask here.

- `look(record)`: `scontrol show job` once; the first time it sees the job ended, the end goes into the
  record (Slurm forgets a job MinJobAge after its end, 300 s by default; the record does not).
- `ended_run(record, facts)`: the job's end as a run state, with the reason as a user reads it:
  COMPLETED -> finished (every supervisor exited 0: the batch script ends with their step), unless
  `stop` ended it; CANCELLED -> stopped ("cancelled outside tfcluster" unless tfcluster did it); TIMEOUT
  -> failed "time limit"; NODE_FAIL -> failed, and the tasks Slurm ended are `lost` (`start --wait` exits
  3); PREEMPTED, OUT_OF_MEMORY, BOOT_FAIL, DEADLINE, FAILED -> failed with the reason.
- `placed(record, say)`: a command that follows a run (`logs -f`, the dashboard) started while its job waits
  for nodes, or while `start` prepares its hosts, waits for `start` to record them (nodes, run dirs),
  saying so once.
- `opener_for(record, facts)` (`live_opener`: asked at each open): how a command reaches the run's hosts.
  While the job runs, its steps (the plan's transport "slurm"); once it is ending or has ended no step can
  start, so the nodes' run dirs are read where the job was submitted (this machine or the login host),
  which sees them when the nodes share its filesystem, as clusters' home directories usually are; where
  they do not, the run dirs read as absent.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from orchestrator.errors import TfclusterError
from orchestrator.plan.model import HostPlan
from orchestrator.plan.slurm import before_allocation
from orchestrator.run import records
from orchestrator.run.slurm_job import ENDED, JobFacts, SlurmClient
from orchestrator.transport.base import Transport
from orchestrator.transport.factory import Opener, slurm_shell, transport_for

CANCEL_WAIT_S = 60.0
STOPPED, CANCELLED_BY_START = "stopped by tfcluster", "cancelled by tfcluster start"  # cancel()'s reasons
# Slurm's end states as a run's, and what the user is told (the reason from Slurm is added where it says more).
END_STATES = {
    "COMPLETED": ("finished", ""), "CANCELLED": ("stopped", "cancelled outside tfcluster (scancel)"),
    "TIMEOUT": ("failed", "time limit"), "NODE_FAIL": ("failed", "node failure"),
    "PREEMPTED": ("failed", "preempted"), "OUT_OF_MEMORY": ("failed", "out of memory"),
    "BOOT_FAIL": ("failed", "a node failed to boot"), "DEADLINE": ("failed", "deadline reached"),
    "FAILED": ("failed", "the job failed"),
}


@dataclass(frozen=True)
class RunEnd:
    state: str  # finished | failed | stopped, or "" when only the run's own files can tell
    reason: str  # as the user reads it: "time limit", "cancelled outside tfcluster (scancel)"
    lost: bool = False  # Slurm ended the tasks with their node (NODE_FAIL): nobody can say how they ended


def look(record: records.RunRecord) -> JobFacts | None:
    """The job of a Slurm run now (None for any other run, or when Slurm cannot be asked: then the record's
    last word stands). An end seen for the first time is saved in the record."""
    if record.slurm is None:
        return None
    client = SlurmClient.for_record(record)
    try:
        facts = client.job(record.slurm.job_id)
    except TfclusterError:
        return None
    finally:
        client.close()
    if not facts.state and record.slurm.state:
        return JobFacts(facts.job_id, record.slurm.state, record.slurm.reason)  # forgotten by Slurm: the record's
    if facts.ended and facts.state != record.slurm.state:
        record.slurm.state = facts.state
        record.slurm.reason = facts.reason
        records.save(record)
    return facts


def ended_run(record: records.RunRecord, facts: JobFacts) -> RunEnd | None:
    """How the run ended with its job (None while the job has not ended; `partial` while it is ending:
    COMPLETING says not yet how)."""
    if facts.state == "COMPLETING":
        return RunEnd("partial", f"ending{f' ({facts.reason})' if facts.reason not in ('', 'None') else ''}")
    if not facts.ended:
        return None
    assert record.slurm is not None
    ours = facts.state == "CANCELLED" and record.slurm.reason in (STOPPED, CANCELLED_BY_START)
    if ours or (facts.state == "COMPLETED" and record.status in ("stopped", "purged")):
        return RunEnd("stopped", record.slurm.reason if ours else STOPPED)
    if facts.state not in END_STATES:
        return RunEnd("", f"Slurm no longer lists job {facts.job_id}")
    state, said = END_STATES[facts.state]
    detail = facts.reason if facts.reason not in ("", "None", "TimeLimit", "NonZeroExitCode") else ""
    reason = f"{said} ({detail})" if said and detail else said or detail
    return RunEnd(state, reason, lost=facts.state == "NODE_FAIL")


def cancel(record: records.RunRecord, why: str, timeout: float = CANCEL_WAIT_S) -> str:
    """`scancel` the run's job and wait until `squeue` no longer lists it (Slurm has ended every process of
    it and released its nodes); saved in the record. Returns what was done, as a phrase."""
    assert record.slurm is not None
    job_id = record.slurm.job_id
    client = SlurmClient.for_record(record)
    try:
        client.cancel(job_id)
        gone = client.wait_gone(job_id, timeout)
    except TfclusterError as exc:
        return f"COULD NOT CANCEL Slurm job {job_id} ({exc.one_line()}): run `scancel {job_id}`"
    finally:
        client.close()
    if record.slurm.state not in ENDED:
        record.slurm.state, record.slurm.reason = "CANCELLED", why
        records.save(record)
    if not gone:
        return f"Slurm job {job_id} cancelled, but squeue still lists it after {timeout:g}s"
    return f"Slurm job {job_id} cancelled and gone from squeue"


def opener_for(record: records.RunRecord, facts: JobFacts | None = None) -> Opener:
    """How commands reach the run's hosts now (see the module docstring); `facts` from `look`, else asked."""
    if record.slurm is None:
        return transport_for
    facts = facts or look(record)
    if facts is None or facts.state == "RUNNING":
        return transport_for
    return submit_host_opener


def live_opener(record: records.RunRecord) -> Opener:
    """`opener_for`, asked anew at each open: a command that reconnects (`logs -f`) follows the job's end."""
    if record.slurm is None:
        return transport_for

    def open_now(host: HostPlan) -> Transport:
        return opener_for(record)(host)  # the job looked at again: running, or ended since the last open

    return open_now


def submit_host_opener(host: HostPlan) -> Transport:
    """The shell of the machine the job was submitted from, in the node's name."""
    return slurm_shell(host.name, host.via, host.ssh, host.login_shell)


def placed(record: records.RunRecord, say: Callable[[str], None], poll: float = 1.0) -> records.RunRecord:
    """The run's record once its hosts can be read: its job has nodes (a Slurm run) and `start` has prepared
    every host, so the record knows each run dir (a host's is resolved on the host; before that, a log's
    path would be wrong). At once for a run that got that far. While `start` still works on it, say what it
    waits for, once each, and read the record again every `poll` s; a start that ended first (Ctrl-C, a
    failed host, a job Slurm would never run) returns the record as it left it."""
    said: set[str] = set()

    def waiting() -> str:
        if record.status != "starting":
            return ""
        if before_allocation(record.plan):
            job = record.slurm.job_id if record.slurm is not None else "?"
            return f"Slurm job {job} is pending: waiting for its nodes (Ctrl-C to leave)"
        if any(not host.run_dir for host in record.hosts):
            return f"run {record.run_id} is starting: waiting for its hosts to be prepared (Ctrl-C to leave)"
        return ""

    while why := waiting():
        if why not in said:
            say(why)
            said.add(why)
        time.sleep(poll)
        record = records.load(record.run_id)
    return record
