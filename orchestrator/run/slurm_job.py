"""A run's Slurm job as Slurm's client commands see it, run where they are: this machine, or the `[slurm]
login` host over [ssh] (one shell transport, transport.factory.slurm_shell). Submit (`sbatch --parsable`,
the script on stdin), look (`scontrol show job -o`: state, reason, nodes, batch node, exit code), the nodes'
NodeAddr (`scontrol show node -o`), the job's first step (`srun --immediate`: see slurm_start), cancel
(`scancel`) and wait until `squeue` no longer lists the job.

Every value that reaches these commands is a job id sbatch gave (digits, checked), a node list scontrol
gave, or a variable name checked by the config schema, each quoted (shell_command).
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass

from orchestrator.errors import HostError
from orchestrator.plan.model import HostPlan
from orchestrator.plan.slurm import SlurmNode
from orchestrator.run import records
from orchestrator.transport.base import Transport
from orchestrator.transport.factory import slurm_shell

JOB_ID = re.compile(r"^\d+$")
COMMAND_TIMEOUT_S = 30.0
# Job states after which the job holds no node (Slurm 22.05; squeue's and scontrol's words).
ENDED = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "OUT_OF_MEMORY", "BOOT_FAIL",
         "DEADLINE")
SHELL_NAME = "slurm"  # how errors of the submit host's commands name it when it is this machine
FIRST_STEP = "tfcluster-first-step"  # the step's name, as squeue -s lists it
ASK_S = 2  # srun --immediate: how long one attempt at the first step waits for Slurm to allow it
# srun's words for a step Slurm cannot start yet, which srun itself would ask for again (Slurm 22.05's
# launch_common_step_retry_errno, and a PrologSlurmctld still running), and "Duplicate job id": what a
# refused srun that slurmctld calls back says when it asks again (benchmarks/results/slurm_first_step.md);
# a new srun asks afresh.
STEP_NOT_YET = ("Requested nodes are busy", "presently disabled", "Switch resources currently not available",
                "Required ports are in use", "Socket timed out", "Resource temporarily unavailable",
                "PrologSlurmctld is still running", "Duplicate job id")


def parse_fields(line: str) -> dict[str, str]:
    """One record of `scontrol show ... -o` (`Key=value Key=value ...`) as a dict. Values with spaces (a
    job's Command, a node's OS) keep only their first word: the fields read here have none."""
    fields: dict[str, str] = {}
    for word in line.split():
        key, sep, value = word.partition("=")
        if sep and key not in fields:
            fields[key] = value
    return fields


@dataclass(frozen=True)
class JobFacts:
    job_id: str
    state: str  # JobState: PENDING, RUNNING, COMPLETING, COMPLETED, TIMEOUT, ... ("" when Slurm forgot it)
    reason: str  # Reason: Priority, Resources, TimeLimit, NodeDown, None, ...
    node_list: str = ""  # NodeList as Slurm compresses it: n[1-3]
    batch_host: str = ""
    exit_code: str = ""  # ExitCode: "<code>:<signal>"

    @property
    def ended(self) -> bool:
        """The job holds no node any more (a job Slurm no longer knows has ended long ago)."""
        return self.state in ENDED or not self.state

    @property
    def said(self) -> str:
        """`PENDING (Priority)`, `RUNNING`: the state as a line says it."""
        return f"{self.state} ({self.reason})" if self.reason and self.reason != "None" else self.state


class SlurmClient:
    """Slurm's client commands for one job's submit host."""

    def __init__(self, shell: Transport) -> None:
        self.shell = shell

    @classmethod
    def for_record(cls, record: records.RunRecord) -> SlurmClient:
        """The submit host of a record's job, with the SSH settings of its plan."""
        assert record.slurm is not None
        first: HostPlan = record.plan.hosts[0]
        return cls(slurm_shell(SHELL_NAME, record.slurm.submit_host, first.ssh, first.login_shell))

    def _run(self, argv: list[str], what: str, stdin: bytes | None = None) -> str:
        result = self.shell.run(argv, timeout=COMMAND_TIMEOUT_S, stdin=stdin)
        if not result.ok:
            tail = (result.stderr.strip() or result.stdout.strip()).splitlines()
            raise HostError(self.shell.host, "command-failed", f"{what}: {tail[-1] if tail else f'exit {result.exit_code}'}")
        return result.stdout

    def submit(self, script: str, drop_env: list[str]) -> str:
        """`sbatch --parsable` of `script` (on stdin); the job id. `drop_env`: variables of this environment
        the job must not get (sbatch would store them with the job, in slurmctld's state files)."""
        unset = [word for name in drop_env for word in ("-u", name)]
        out = self._run(["env", *unset, "sbatch", "--parsable"], "sbatch refused the job", stdin=script.encode())
        job_id = out.strip().split(";")[0]
        if not JOB_ID.match(job_id):
            raise HostError(self.shell.host, "command-failed", f"sbatch said {out.strip()[:80]!r}, not a job id")
        return job_id

    def job(self, job_id: str) -> JobFacts:
        """What `scontrol show job -o` says of the job now (state "" when Slurm no longer knows it)."""
        result = self.shell.run(["scontrol", "show", "job", "-o", job_id], timeout=COMMAND_TIMEOUT_S)
        if not result.ok:
            if "Invalid job id" in result.stderr:
                return JobFacts(job_id, "", "")
            raise HostError(self.shell.host, "command-failed", f"scontrol show job {job_id}: {result.stderr.strip()[-200:]}")
        f = parse_fields(result.stdout)
        return JobFacts(job_id, f.get("JobState", ""), f.get("Reason", ""), f.get("NodeList", ""),
                        f.get("BatchHost", ""), f.get("ExitCode", ""))

    def nodes(self, node_list: str) -> list[SlurmNode]:
        """The allocation's nodes with their NodeAddr (where the tasks dial them; names need not resolve)."""
        out = self._run(["scontrol", "show", "node", "-o", node_list], f"scontrol show node {node_list}")
        found = [parse_fields(line) for line in out.splitlines() if line.strip()]
        return [SlurmNode(f["NodeName"], f.get("NodeAddr") or f["NodeName"]) for f in found if "NodeName" in f]

    def first_step(self, job_id: str, nodes: int) -> str:
        """One try at the job's first step, `true` on each of its `nodes`, asking Slurm for at most ASK_S s:
        "" once it ran, else srun's reason when Slurm cannot start it yet (STEP_NOT_YET). Any other failure
        is a HostError."""
        argv = ["srun", f"--jobid={job_id}", "--overlap", f"--nodes={nodes}", f"--ntasks={nodes}", "--ntasks-per-node=1",
                f"--immediate={ASK_S}", "--quiet", "--chdir=/", f"--job-name={FIRST_STEP}", "true"]
        result = self.shell.run(argv, timeout=COMMAND_TIMEOUT_S + ASK_S)
        if result.ok:
            return ""
        said = (result.stderr.strip().splitlines() or [f"exit {result.exit_code}"])[-1]
        if any(words in said for words in STEP_NOT_YET):
            return said.removeprefix("srun: error: ")
        raise HostError(self.shell.host, "command-failed", f"the first step of Slurm job {job_id}: {said}")

    def cancel(self, job_id: str) -> None:
        self._run(["scancel", job_id], f"scancel {job_id}")

    def wait_gone(self, job_id: str, timeout: float, every: float = 0.2) -> bool:
        """Until `squeue` no longer lists the job (it has ended and released its nodes); False after `timeout`."""
        deadline = time.monotonic() + timeout
        while True:
            result = self.shell.run(["squeue", "-h", "-j", job_id, "-o", "%T"], timeout=COMMAND_TIMEOUT_S)
            if not result.stdout.strip():
                return True
            if time.monotonic() > deadline:
                return False
            time.sleep(every)

    def close(self) -> None:
        self.shell.close()
