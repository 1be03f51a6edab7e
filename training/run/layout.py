"""A host's run directory: `<workdir>/runs/<run-id>/<host>/`. Stdlib only (shipped to the hosts).

Shared by the orchestrator (which creates and reads it over the transport) and by the supervisor,
agent and task programs (which write it), so both sides agree on every path.

Every host has a directory of its own inside the run's, so any number of hosts may share one workdir (an
NFS home, the nodes of a Slurm allocation, loopback machines in the tests): everything a host writes
(run.json, code/, lib/, logs, events, state, checkpoints) is its own, and the run marker below names one
host's part of the run, so a `stop` on one machine never touches another host's processes even where
several hosts share one machine.

- `code/`: the user's files (`[training] sync`), hard links to the host's content cache; the tasks' cwd.
- `lib/`: tfcluster's own package under HOST_PACKAGE, plus `tfcluster_report.py` beside it; on every
  task's PYTHONPATH, after the program's own directory, so a user's `training/` package is theirs.
"""

from __future__ import annotations

import os

HOST_PACKAGE = "_tfcluster_training"  # the name tfcluster's `training` package is shipped under
RUN_FILE = "run.json"  # {"run_id", "created", "plan": ClusterPlan.to_json()}
# Every process of a run has `TFCLUSTER_RUN_DIR=<run dir>` in its environment (set when it is exec'd):
# `stop` and `probe` find the run's processes by it in /proc, orphans included.
RUN_DIR_ENV = "TFCLUSTER_RUN_DIR"


def task_name(job: str, index: int) -> str:
    """A task's one name, wherever a user reads it: TensorFlow's `job:index` (`worker:1`): the CLI, JSON,
    Prometheus labels, the dashboard, and its TensorBoard run (its summaries dir is named so)."""
    return f"{job}:{index}"


def file_stem(job: str, index: int) -> str:
    """How a task's files on a host are named (logs, events, state, TFCLUSTER_TASK_ID): `worker-1`, storage."""
    return f"{job}-{index}"


def name_of_stem(stem: str) -> str:
    """`worker-1` -> `worker:1` (anything else is returned as it is)."""
    job, sep, index = stem.rpartition("-")
    return task_name(job, int(index)) if sep and index.isdigit() else stem


class RunLayout:
    """Every path of one run dir. A plain class, not a dataclass: the supervisor imports this at every
    start on every host, and `dataclasses` alone costs it about 10 ms of CPU per start (measured on
    this project's 2-core VM)."""

    __slots__ = ("root",)

    def __init__(self, root: str) -> None:
        self.root = root  # <workdir>/runs/<run-id>/<host>

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RunLayout) and other.root == self.root

    def __hash__(self) -> int:
        return hash(self.root)

    def __repr__(self) -> str:
        return f"RunLayout({self.root!r})"

    @classmethod
    def for_host(cls, workdir: str, run_id: str, host: str) -> RunLayout:
        return cls(os.path.join(workdir, "runs", run_id, host))

    @property
    def code(self) -> str:
        return os.path.join(self.root, "code")

    @property
    def lib(self) -> str:
        """tfcluster's package (HOST_PACKAGE) and `tfcluster_report`: every task's PYTHONPATH, and the cwd
        of `python -m <HOST_PACKAGE>.<module>` commands the orchestrator runs on the host."""
        return os.path.join(self.root, "lib")

    @property
    def events(self) -> str:
        return os.path.join(self.root, "events")

    @property
    def logs(self) -> str:
        return os.path.join(self.root, "logs")

    @property
    def state(self) -> str:
        return os.path.join(self.root, "state")

    @property
    def summaries(self) -> str:
        """TensorBoard event files, one directory (one TensorBoard run) per task that writes some."""
        return os.path.join(self.root, "summaries")

    def summaries_dir(self, job: str, task: int) -> str:
        return os.path.join(self.summaries, task_name(job, task))

    @property
    def run_file(self) -> str:
        return os.path.join(self.root, RUN_FILE)

    def checkpoints(self, checkpoint_dir: str) -> str:
        """Relative checkpoint dirs live in the run dir of the chief's host; absolute ones are shared."""
        return checkpoint_dir if os.path.isabs(checkpoint_dir) else os.path.join(self.root, checkpoint_dir)

    def events_file(self, job: str, task: int) -> str:
        return os.path.join(self.events, f"{job}-{task}.jsonl")

    def log_file(self, job: str, task: int) -> str:
        return os.path.join(self.logs, f"{job}-{task}.log")

    def task_state_file(self, job: str, task: int) -> str:
        return os.path.join(self.state, f"{job}-{task}.json")

    def hold_file(self, job: str, task: int) -> str:
        """Written by the orchestrator when the user stops a task for good: while it exists, the supervisor
        never starts that task again (training/supervisor/hold.py)."""
        return os.path.join(self.state, f"{job}-{task}.hold")

    def self_progress_file(self, job: str, task: int) -> str:
        """Written by a task process that writes its own progress events (training/public/report.py): holds its
        TFCLUSTER_TASK_ID, so the supervisor's log tailer (training/progress/tailer.py) stands down for it."""
        return os.path.join(self.state, f"{job}-{task}.self-progress")

    def gpus_seen_file(self, job: str, task: int) -> str:
        """Written by a built-in task the plan gives GPUs once TensorFlow sees them all (training/task.py):
        until then its supervisor does not count it up for `start` (training/supervisor/policy.py)."""
        return os.path.join(self.state, f"{job}-{task}.gpus-seen")

    def facts_file(self, host: str) -> str:
        """What the host's supervisor sees of its tasks' processes (training/telemetry/host_facts.py).
        Not *.json: readers of the state files' glob never mistake it for a task's state."""
        return os.path.join(self.state, f"host-{host}.facts")

    def peer_marks_file(self, host: str) -> str:
        """The host's peer channel's sequence numbers (training/supervisor/peer_marks.py). Not *.json:
        readers of the state files' glob never mistake it for a task's state."""
        return os.path.join(self.state, f"peers-{host}.marks")

    def supervisor_state_file(self, host: str) -> str:
        return os.path.join(self.state, f"supervisor-{host}.json")

    def supervisor_events_file(self, host: str) -> str:
        """task_state events written by the host's supervisor."""
        return os.path.join(self.events, f"supervisor-{host}.jsonl")

    def dirs(self) -> list[str]:
        return [self.root, self.code, self.lib, self.events, self.logs, self.state]


def host_module(name: str) -> str:
    """A module of tfcluster's package as the hosts name it (`python -m` in RunLayout.lib)."""
    return f"{HOST_PACKAGE}.{name}"
