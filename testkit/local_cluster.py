"""A real TensorFlow cluster on this machine: one plain subprocess per task, run exactly as the supervisor
would run it (`python -m <HOST_PACKAGE>.task`, cwd = <run>/code, lib/ on PYTHONPATH, the plan's env +
TFCLUSTER_RUN_DIR and TFCLUSTER_TASK_ID).

The plan is a real ClusterPlan (orchestrator.plan.from_file.plan_config) of `local` hosts on 127.0.0.1; run.json is
written from it; `lib/` holds a copy of the `training` package under its name on the hosts (what the
orchestrator ships). Every process
leads its own process group and `stop()` kills the groups that are still alive: no orphan survives a test.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestrator.config.schema import Config
from orchestrator.plan.from_file import plan_config
from orchestrator.plan.model import ClusterPlan, TaskPlan
from orchestrator.run.local_ports import free_port_block
from training.run.layout import HOST_PACKAGE, file_stem

REPO = Path(__file__).resolve().parents[1]


def local_plan(mode: str, *, ps: int = 2, workers: int = 2, training: Mapping[str, Any] | None = None,
               python: str = sys.executable) -> ClusterPlan:
    """ps tasks on their own local "hosts" (one ps task per host, as the plan rules say), the workers on one."""
    hosts: list[dict[str, Any]] = [
        {"name": f"ps{i}", "address": "127.0.0.1", "roles": ["ps"], "transport": "local"} for i in range(ps)
    ]
    hosts.append({"name": "wk", "address": "127.0.0.1", "roles": ["worker"], "workers": workers,
                  "transport": "local"})
    tasks = ps + workers + 1 + len(hosts)  # at most one chief, then each host's supervisor's control port
    config = Config.model_validate({
        "cluster": {"name": "itest", "mode": mode, "base_port": free_port_block(tasks)},
        "remote": {"python": python},
        "hosts": hosts,
        "training": dict(training or {}),
    })
    return plan_config(config)


@dataclass
class LocalCluster:
    plan: ClusterPlan
    run_dir: Path
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    run_id: str = "itest"
    # Processes, logs and optional CPU pinning keyed by each task's file stem ("worker-1", as its files on a
    # host are named); the pinning emulates one machine per task on a shared box
    affinity: dict[str, set[int]] = field(default_factory=dict)

    @property
    def code(self) -> Path:
        return self.run_dir / "code"

    @property
    def lib(self) -> Path:
        return self.run_dir / "lib"

    def prepare(self) -> None:
        for sub in ("code", "lib", "events", "logs", "state"):
            (self.run_dir / sub).mkdir(parents=True, exist_ok=True)
        shutil.copytree(REPO / "training", self.lib / HOST_PACKAGE, dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns("__pycache__"))
        run = {"run_id": self.run_id, "created": time.time(), "plan": self.plan.to_json()}
        (self.run_dir / "run.json").write_text(json.dumps(run), encoding="utf-8")

    def env_for(self, task: TaskPlan) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("TF_CONFIG", "TFCLUSTER_"))}
        env.update(task.env)
        env["TFCLUSTER_RUN_DIR"] = str(self.run_dir)
        env["TFCLUSTER_TASK_ID"] = f"{file_stem(task.job, task.index)}#0"  # (how a supervisor marks it)
        env["PYTHONPATH"] = str(self.lib)
        return env

    def start_task(self, task: TaskPlan) -> subprocess.Popen[bytes]:
        stem = file_stem(task.job, task.index)  # logs/<job>-<index>.log, as on a host
        log = open(self.run_dir / "logs" / f"{stem}.log", "ab")  # noqa: SIM115 (owned by the child)
        cpus = self.affinity.get(stem)
        try:
            proc = subprocess.Popen(
                task.command, cwd=self.code, env=self.env_for(task), stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=(lambda: os.sched_setaffinity(0, cpus)) if cpus else None,  # noqa: PLW1509 - benchmarks pin a straggler's CPUs
            )
        finally:
            log.close()
        self.procs[stem] = proc
        return proc

    def start(self) -> LocalCluster:
        self.prepare()
        for task in self.plan.tasks:
            self.start_task(task)
        return self

    def wait(self, timeout: float) -> dict[str, int | None]:
        """Exit codes once every task has exited, or None for those still running at the deadline."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and any(p.poll() is None for p in self.procs.values()):
            time.sleep(0.2)  # this wait's polling interval
        return {name: p.poll() for name, p in self.procs.items()}

    def kill(self, name: str, sig: int = signal.SIGKILL) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.procs[name].pid, sig)

    def stop(self) -> None:
        for name, proc in self.procs.items():
            if proc.poll() is None:
                self.kill(name)
        for proc in self.procs.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=10)

    def events(self, job: str, task: int, kind: str = "progress") -> list[dict[str, Any]]:
        path = self.run_dir / "events" / f"{job}-{task}.jsonl"
        if not path.exists():
            return []
        out = []
        for line in path.read_text(encoding="utf-8").splitlines():
            event = json.loads(line)  # a malformed line is a test failure here: the writer must be valid
            if event.get("kind") == kind:
                out.append(event)
        return out

    def log(self, name: str) -> str:
        """A task's log, by its name (`chief:0`) or its file stem (`chief-0`)."""
        job, sep, index = name.rpartition(":")
        stem = file_stem(job, int(index)) if sep and index.isdigit() else name
        path = self.run_dir / "logs" / f"{stem}.log"
        return path.read_text(encoding="utf-8", errors="replace") if path.exists() else ""

    def logs_tail(self, lines: int = 30) -> str:
        """Every task's log tail, for assertion messages."""
        out = []
        for name in self.procs:
            tail = "\n".join(self.log(name).splitlines()[-lines:])
            out.append(f"--- {name} (rc={self.procs[name].poll()}) ---\n{tail}")
        return "\n".join(out)


@contextlib.contextmanager
def running_cluster(plan: ClusterPlan, run_dir: Path,
                    affinity: Mapping[str, set[int]] | None = None) -> Iterator[LocalCluster]:
    cluster = LocalCluster(plan, run_dir, affinity=dict(affinity or {}))
    try:
        yield cluster.start()
    finally:
        cluster.stop()
