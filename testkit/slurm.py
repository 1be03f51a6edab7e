"""A real three-node Slurm cluster on this machine, for integration tests: munged, one slurmctld and three
slurmd processes, all real (Debian 12's slurm-wlm 22.05 and munge 0.5; installed by scripts/provision).

API (the session fixture `slurm_cluster` in tests/conftest.py starts one on first use and stops it at the end):

    def test_something(slurm_cluster):
        c = slurm_cluster
        c.nodes                          # ["n1", "n2", "n3"]
        c.addresses                      # {"n1": "127.0.0.11", "n2": "127.0.0.12", "n3": "127.0.0.13"}
        c.env                            # os.environ + SLURM_CONF: the environment for every client command
        c.run("srun", "-N3", "hostname")  # a client command (text, captured); its exit code is not checked
        c.hosts_toml(path, slurm={"nodes": 3, "workers": 2}, training={...})   # a [slurm] hosts.toml for it
        job = c.submit(script_path)      # `sbatch --parsable`: the job id
        c.wait_job(job, timeout=120)     # `scontrol show job -o` fields once the job has ended
        c.job_processes(job)             # the job's processes still alive (none once it ended and was reaped)

The cluster, as the issue asks: every node has NodeHostname = this machine's hostname and its own
NodeAddr (127.0.0.11, .12, .13) and slurmd port, so the names n1..n3 resolve nowhere but in Slurm (as on a
cluster whose node names only Slurm knows). What this Slurm needs to run three slurmd on one machine:
- `slurmd -N <node>` (Debian builds Slurm with multiple-slurmd support) and `%n` in SlurmdSpoolDir,
  SlurmdPidFile and SlurmdLogFile; each spool directory must exist before slurmd starts (it puts its
  domain socket there);
- ProctrackType=proctrack/linuxproc and TaskPlugin=task/none (no cgroups to share), SelectType=
  select/cons_tres with CR_CPU, and SlurmdParameters=config_overrides: each node declares CPUS_PER_NODE
  CPUs though the three share this machine's two;
- munged with a key of its own (1 KiB from os.urandom, mode 0400), on a socket of its own, named in
  slurm.conf by AuthInfo=socket=...; `--force` because its socket directory is not /run/munge;
- no accounting (AccountingStorageType=accounting_storage/none: no slurmdbd), so `sacct` answers "Slurm
  accounting storage is disabled"; a finished job's state is read with `scontrol show job -o`, which keeps
  it MinJobAge seconds (set to an hour here) after its end;
- ReturnToService=2: a node set DOWN comes back as soon as its slurmd registers again.
Job facts used by tests and the plan (Slurm 22.05, read in its man pages and checked here): `sbatch
--parsable` prints `<job id>` (or `<job id>;<cluster>`); job states PENDING, RUNNING, COMPLETED, FAILED,
CANCELLED, TIMEOUT, NODE_FAIL, PREEMPTED, OUT_OF_MEMORY; steps of one job do not share CPUs unless started
with `--overlap` (since 20.11); `srun --jobid=<job> --overlap` joins a running job from outside; with
`--ntasks=T --nodes=N` alone Slurm places tasks by the CPUs it allocated (7 tasks on 3 nodes of 4 CPUs:
4, 2, 1), so an exact rank -> node layout needs `--distribution=arbitrary` with SLURM_HOSTFILE; `scancel
--signal=TERM <job>.<step>` makes slurmstepd mark the step CANCELLED (the job ends FAILED), SIGUSR1 does
not; `scontrol update NodeName=n3 State=DOWN` under a running batch job requeues it (PENDING, Reason
BeginTime, Restarts=1) rather than ending it NODE_FAIL, unless it was submitted with --no-requeue.

Daemons run in the foreground as children of this process (each in its own session) with SLURM_CONF in
their environment, which slurmstepd and every job process inherit: `stop()` cancels every job, stops the
daemons and kills whatever process still carries this cluster's SLURM_CONF. As root (CI) slurmd runs
jobs as any user; as a normal user SlurmUser and SlurmdUser are that user and only their jobs run.
"""

from __future__ import annotations

import contextlib
import getpass
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import psutil

from orchestrator.run.local_ports import free_port_block
from orchestrator.run.slurm_job import ENDED as ENDED_STATES
from orchestrator.run.slurm_job import parse_fields
from testkit.toml_out import toml_value
from testkit.tools import find_tool, search_path

SLURM_PATH_ENV = "TFCLUSTER_SLURM_PATH"
DAEMONS = ("slurmctld", "slurmd", "munged")
CLIENTS = ("srun", "sbatch", "squeue", "scontrol", "scancel", "sacct")
NODES = ("n1", "n2", "n3")
CPUS_PER_NODE = 4
MEMORY_MB = 2000
START_TIMEOUT_S = 30.0


def slurm_available() -> str | None:
    """None when every Slurm program and munged is found, else one line naming what is missing."""
    missing = [tool for tool in (*DAEMONS, *CLIENTS) if find_tool(tool, SLURM_PATH_ENV) is None]
    if missing:
        return (f"{', '.join(missing)} not found in {search_path(SLURM_PATH_ENV)}: run scripts/provision slurm "
                "(`make test` does), or install slurm-wlm and munge")
    return None


def tool(name: str) -> str:
    """The path of one of Slurm's programs (srun, sbatch, ...) as the test cluster runs them."""
    return find_tool(name, SLURM_PATH_ENV) or name


class SlurmCluster:
    """munged + slurmctld + one slurmd per node, under one temporary directory. Build with `start_cluster`."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.nodes = list(NODES)
        self.addresses = {name: f"127.0.0.{11 + i}" for i, name in enumerate(self.nodes)}
        self.hostname = socket.gethostname()
        self.conf = root / "slurm.conf"
        self.munge_socket = root / "munge" / "munge.socket"
        # Nothing of a Slurm job this test run may itself be inside: srun would take it for a step of it.
        self.env = {**{k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}, "SLURM_CONF": str(self.conf)}
        self._procs: dict[str, subprocess.Popen[bytes]] = {}

    # --- configuration -------------------------------------------------------------------------------
    def _write_conf(self) -> None:
        base = free_port_block(1 + len(self.nodes))
        ctld_port, node_ports = base, [base + 1 + i for i in range(len(self.nodes))]
        user = getpass.getuser()
        root = self.root
        lines = [
            "ClusterName=tfctest",
            f"SlurmctldHost={self.hostname}(127.0.0.1)",
            f"SlurmctldPort={ctld_port}",
            f"SlurmUser={user}",
            f"SlurmdUser={user}",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            f"AuthInfo=socket={self.munge_socket}",
            f"StateSaveLocation={root / 'state'}",
            f"SlurmdSpoolDir={root / 'spool-%n'}",
            f"SlurmctldPidFile={root / 'slurmctld.pid'}",
            f"SlurmdPidFile={root / 'slurmd-%n.pid'}",
            f"SlurmctldLogFile={root / 'slurmctld.log'}",
            f"SlurmdLogFile={root / 'slurmd-%n.log'}",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_CPU",
            "SlurmdParameters=config_overrides",
            "ReturnToService=2",
            "SchedulerType=sched/builtin",
            "AccountingStorageType=accounting_storage/none",
            "JobAcctGatherType=jobacct_gather/none",
            "JobCompType=jobcomp/none",
            "MpiDefault=none",
            "SwitchType=switch/none",
            "MailProg=/bin/true",
            "MinJobAge=3600",  # finished jobs stay visible to `scontrol show job` (there is no sacct)
            "KillWait=5",  # SIGTERM to SIGKILL when a job is cancelled or times out
            "InactiveLimit=0",
            "SlurmctldTimeout=30",
            "SlurmdTimeout=30",
        ]
        for name, port in zip(self.nodes, node_ports, strict=True):
            lines.append(f"NodeName={name} NodeHostname={self.hostname} NodeAddr={self.addresses[name]} "
                         f"Port={port} CPUs={CPUS_PER_NODE} RealMemory={MEMORY_MB} State=UNKNOWN")
        lines.append(f"PartitionName=debug Nodes={','.join(self.nodes)} Default=YES MaxTime=INFINITE State=UP")
        self.conf.write_text("\n".join(lines) + "\n")

    # --- lifecycle -----------------------------------------------------------------------------------
    def start(self) -> None:
        (self.root / "munge").mkdir()
        (self.root / "state").mkdir()
        for name in self.nodes:
            (self.root / f"spool-{name}").mkdir()
        key = self.root / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        self._write_conf()
        munge = self.root / "munge"
        self._spawn("munged", [tool("munged"), "--foreground", "--force", f"--key-file={key}",
                               f"--socket={self.munge_socket}", f"--pid-file={munge / 'munged.pid'}",
                               f"--log-file={munge / 'munged.log'}", f"--seed-file={munge / 'munged.seed'}"])
        self._wait_for(self.munge_socket.exists, "munged's socket")
        self._spawn("slurmctld", [tool("slurmctld"), "-D", "-f", str(self.conf)])
        self._wait_for(lambda: "UP" in self.run("scontrol", "ping").stdout, "slurmctld to answer `scontrol ping`")
        for name in self.nodes:
            self._spawn(f"slurmd-{name}", [tool("slurmd"), "-D", "-N", name, "-f", str(self.conf)])
        self._wait_for(self._all_idle, "every node to be idle in `sinfo`")

    def _spawn(self, label: str, command: list[str]) -> None:
        log = (self.root / f"{label}.out").open("wb")
        with log:
            self._procs[label] = subprocess.Popen(
                command, env=self.env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True,  # a Ctrl-C reaches pytest, whose teardown stops us
            )

    def _wait_for(self, ready: Callable[[], bool], what: str, timeout: float = START_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            dead = [label for label, proc in self._procs.items() if proc.poll() is not None]
            if dead:
                raise RuntimeError(f"{dead[0]} exited while waiting for {what}: {self._tail(dead[0])}")
            if ready():
                return
            time.sleep(0.1)  # this wait's polling interval
        raise RuntimeError(f"Slurm test cluster: no {what} after {timeout:.0f} s (logs in {self.root})")

    def _tail(self, label: str) -> str:
        path = self.root / f"{label}.out"
        return path.read_text(errors="replace")[-2000:] if path.exists() else ""

    def _all_idle(self) -> bool:
        out = self.run("sinfo", "-h", "-N", "-o", "%N %T").stdout.split()
        states = dict(zip(out[::2], out[1::2], strict=False))
        return all(states.get(name) == "idle" for name in self.nodes)

    def stop(self) -> None:
        """Cancel every job, stop the daemons, then kill any process of this cluster still alive."""
        if self._procs.get("slurmctld") is not None and self._procs["slurmctld"].poll() is None:
            self.run("scancel", "--full", "--user", getpass.getuser(), timeout=10)
        for label in [*[f"slurmd-{n}" for n in self.nodes], "slurmctld", "munged"]:
            proc = self._procs.pop(label, None)
            if proc is None:
                continue
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=5)
        left = self.cluster_processes()  # slurmstepd and job processes: they leave the daemons' tree
        for proc in left:
            with contextlib.suppress(psutil.Error):
                proc.kill()
        psutil.wait_procs(left, timeout=10)

    @contextlib.contextmanager
    def not_responding(self, node: str, timeout: float = 90.0) -> Iterator[Callable[[], None]]:
        """`node`'s slurmd stopped (SIGSTOP) until slurmctld flags the node not responding (`*` in sinfo: its
        ping timed out), as a slurmd too loaded to answer in time is; at the end it runs again and the flag
        is gone. Yields `resume()`, which lets the slurmd run again earlier (the flag stays until slurmctld
        hears from it)."""
        slurmd = self._procs[f"slurmd-{node}"]

        def flagged() -> bool:
            return "*" in self.run("sinfo", "-h", "-n", node, "-o", "%T").stdout

        def resume() -> None:
            os.kill(slurmd.pid, signal.SIGCONT)

        os.kill(slurmd.pid, signal.SIGSTOP)
        try:
            self._wait_for(flagged, f"{node} flagged not responding", timeout)
            yield resume
        finally:
            resume()
        self._wait_for(lambda: not flagged(), f"{node} responding again", timeout)

    # --- clients and facts ---------------------------------------------------------------------------
    def run(self, *command: str, timeout: float = 60.0, env: Mapping[str, str] | None = None,
            cwd: str | os.PathLike[str] | None = None) -> subprocess.CompletedProcess[str]:
        """A Slurm client command against this cluster (exit code not checked: read .returncode)."""
        return subprocess.run([tool(command[0]), *command[1:]], env={**self.env, **(env or {})}, cwd=cwd,
                              capture_output=True, text=True, timeout=timeout, check=False)

    def hosts_toml(self, path: str | os.PathLike[str], *, slurm: Mapping[str, object], mode: str = "between-graph",
                   training: Mapping[str, object] | None = None, workdir: str | None = None) -> Path:
        """A hosts.toml whose [slurm] job runs here: this venv's python, a free block of ports, `workdir`
        (default: beside the file) for the runs."""
        sections: dict[str, Mapping[str, object]] = {
            "cluster": {"name": "slurmtest", "mode": mode, "base_port": free_port_block(64)},
            "remote": {"python": sys.executable, "workdir": workdir or str(Path(path).parent / "work")},
            "slurm": slurm, "training": training or {},
        }
        lines = []
        for name, keys in sections.items():
            lines += [f"[{name}]", *(f"{k} = {toml_value(v)}" for k, v in keys.items()), ""]
        Path(path).write_text("\n".join(lines))
        return Path(path)

    def submit(self, script: str | os.PathLike[str], *args: str, cwd: str | os.PathLike[str] | None = None) -> str:
        """`sbatch --parsable [args] script`: the job id (raises with sbatch's message when it refuses)."""
        res = self.run("sbatch", "--parsable", *args, str(script), cwd=cwd)
        if res.returncode != 0:
            raise RuntimeError(f"sbatch refused {script}: {res.stderr.strip()}")
        return res.stdout.strip().split(";")[0]

    def job(self, job_id: str) -> dict[str, str]:
        """`scontrol show job -o <id>` as fields ({} when Slurm does not know the job)."""
        res = self.run("scontrol", "show", "job", "-o", job_id)
        return parse_fields(res.stdout) if res.returncode == 0 else {}

    def wait_job(self, job_id: str, timeout: float) -> dict[str, str]:
        """The job's fields once its JobState is an end state (AssertionError with the last ones after timeout)."""
        deadline = time.monotonic() + timeout
        fields = self.job(job_id)
        while fields.get("JobState") not in ENDED_STATES:
            if time.monotonic() > deadline:
                raise AssertionError(f"job {job_id} did not end in {timeout:.0f} s: {fields}")
            time.sleep(0.2)  # this wait's polling interval
            fields = self.job(job_id)
        return fields

    def node(self, name: str) -> dict[str, str]:
        """`scontrol show node -o <name>` as fields ({} when Slurm does not know it)."""
        res = self.run("scontrol", "show", "node", "-o", name)
        return parse_fields(res.stdout) if res.returncode == 0 else {}

    def node_addresses(self) -> dict[str, str]:
        """NodeName -> NodeAddr, read from `scontrol show node -o` (as the plan reads them)."""
        res = self.run("scontrol", "show", "node", "-o")
        records = [parse_fields(line) for line in res.stdout.splitlines() if line.strip()]
        return {r["NodeName"]: r["NodeAddr"] for r in records}

    def explain(self, *job_ids: str) -> str:
        """What Slurm says now, for a failed test's message: each job's fields, the queue with its steps, the
        nodes' states, and the last lines of slurmctld's log."""
        keys = ("JobState", "Reason", "SubmitTime", "StartTime", "EndTime", "NodeList")
        parts = [f"job {j}: {({k: v for k, v in self.job(j).items() if k in keys})}" for j in job_ids]
        parts.append("squeue -s: " + self.run("squeue", "-h", "-s", "-o", "%i %j %N").stdout.strip())
        parts.append("sinfo: " + self.run("sinfo", "-h", "-N", "-o", "%N %T").stdout.strip())
        log = self.root / "slurmctld.log"
        parts.append("slurmctld.log: " + "\n".join(log.read_text(errors="replace").splitlines()[-25:])
                     if log.exists() else "no slurmctld.log")
        return "\n".join(parts)

    def cluster_processes(self) -> list[psutil.Process]:
        """Every live process (daemons, slurmstepd, job processes) whose environment names this cluster's
        SLURM_CONF (srun and sbatch pass it on to every job process)."""
        marker = f"SLURM_CONF={self.conf}"
        found = []
        for proc in psutil.process_iter():
            with contextlib.suppress(psutil.Error):
                if proc.pid != os.getpid() and marker in _environ_words(proc.pid):
                    found.append(proc)
        return found

    def job_processes(self, job_id: str) -> list[psutil.Process]:
        """The live processes of one job: its slurmstepd and every process with SLURM_JOB_ID=<id>."""
        marker = f"SLURM_JOB_ID={job_id}"
        stepd = f"slurmstepd: [{job_id}."
        return [p for p in self.cluster_processes()
                if marker in _environ_words(p.pid) or " ".join(_cmdline(p)).startswith(stepd)]


def _environ_words(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/environ").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return []


def _cmdline(proc: psutil.Process) -> list[str]:
    try:
        return [str(word) for word in proc.cmdline()]
    except psutil.Error:
        return []


def start_cluster() -> SlurmCluster:
    """Start munged, slurmctld and the three slurmd under a fresh temporary directory."""
    missing = slurm_available()
    if missing:
        raise RuntimeError(missing)
    cluster = SlurmCluster(Path(tempfile.mkdtemp(prefix="tfcluster-slurm-")))
    try:
        cluster.start()
    except BaseException:
        cluster.stop()
        raise
    return cluster


def remove(cluster: SlurmCluster) -> None:
    """Stop the cluster and delete its directory."""
    cluster.stop()
    shutil.rmtree(cluster.root, ignore_errors=True)
