"""What the script `tfcluster export slurm` writes runs on the nodes, without tfcluster: this module's source,
given to `python -c` (stdlib only, Python 3.8+; the orchestrator imports it only to encode the job and to
test it). Three commands:

- `nodes` (once, in the batch script): the allocation's nodes sorted by name, as TensorFlow's
  SlurmClusterResolver sorts them, each with its NodeAddr (`scontrol show hostnames`, `scontrol show node
  -o`), one `name address` line each: the script puts them in TFCLUSTER_SLURM_NODES for every rank;
- `hostfile`: one node name per rank, for srun's `--distribution=arbitrary` (SLURM_HOSTFILE), so every rank
  runs on the node the plan gives it;
- `run` (each rank of the job step): the plan's task for SLURM_PROCID with the node placeholders
  (`<node-K>`, `<node-K-addr>`, orchestrator.plan.slurm) replaced by the K-th node's name and NodeAddr: its
  environment with TF_CONFIG, CUDA_VISIBLE_DEVICES (the plan's GPU indexes, mapped through the
  CUDA_VISIBLE_DEVICES Slurm gave the step, if any) and TFCLUSTER_RUN_DIR; its run dir
  `<workdir>/runs/<cluster>-slurm-<job id>/<node>/` (run.json, logs/, events/, state/: the layout a
  built-in task reads); its command, output in logs/<job>-<task>.log. SIGTERM, SIGINT and SIGHUP go on to
  the task's process group and the rank then exits 0 (ended by Slurm: `scancel` or the time limit, which
  Slurm records as the job's state). When the task the run waits for (the chief, or worker 0; `success =
  "chief"` or a client mode) exits 0, its rank signals the whole step with SIGUSR1 (`scancel
  --signal=USR1 <job>.<step>`; a SIGTERM would make Slurm mark the step cancelled and fail the job), and
  every other rank ends its task with SIGTERM and exits 0: serving tasks that never end by themselves (a
  user's `server.join()`) end with the run. A task killed by one of these signals has been ended, not
  failed. srun starts each rank with SIGUSR1 ignored (a `trap` before the exec), so a rank still starting
  when the step is signalled is not killed by it; the rank catches it from its first line on. Any other exit ends the rank with the task's code: srun's `--kill-on-bad-exit` then ends the
  step and the job fails.
A setup problem is one line on stderr and exit 2.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
import zlib
from typing import Any

PLAN_ENV = "TFCLUSTER_SLURM_PLAN"  # the job: base64 of zlib of JSON {"plan", "tasks_per_node", "run_name"}
NODES_ENV = "TFCLUSTER_SLURM_NODES"  # `name address` lines, in the resolver's order
PLACEHOLDER = re.compile(r"<node-(\d+)(-addr)?>")
CLIENT_CHIEF_MODES = ("in-graph", "parameter-server-strategy")
END_SIGNAL = signal.SIGUSR1  # from the rank whose task ended the run, to every rank of the step
ENDING_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, END_SIGNAL)


class RankError(Exception):
    """A problem that stops this rank before its task starts: one line, exit 2."""


def encode_job(job: dict[str, Any]) -> str:
    return base64.b64encode(zlib.compress(json.dumps(job, separators=(",", ":")).encode(), 9)).decode("ascii")


def decode_job(text: str) -> dict[str, Any]:
    try:
        job: dict[str, Any] = json.loads(zlib.decompress(base64.b64decode(text)))
        return job
    except (ValueError, zlib.error) as exc:
        raise RankError(f"${PLAN_ENV} is not a job this script wrote: {exc}") from None


def parse_node_addresses(scontrol_output: str) -> dict[str, str]:
    """NodeName -> NodeAddr from `scontrol show node -o` (one `Key=value ...` record per line)."""
    addresses = {}
    for line in scontrol_output.splitlines():
        fields = dict(word.split("=", 1) for word in line.split() if "=" in word)
        if "NodeName" in fields:
            addresses[fields["NodeName"]] = fields.get("NodeAddr") or fields["NodeName"]
    return addresses


def parse_nodes(text: str) -> list[tuple[str, str]]:
    return [(line.split()[0], line.split()[1]) for line in text.splitlines() if len(line.split()) == 2]


def node_of_rank(tasks_per_node: list[int], rank: int) -> int:
    start = 0
    for index, count in enumerate(tasks_per_node):
        if rank < start + count:
            return index
        start += count
    raise RankError(f"rank {rank} is beyond the job's {start} tasks: run the script as exported")


def substitute(text: str, nodes: list[tuple[str, str]]) -> str:
    """The node placeholders in `text` replaced by the nodes' names and addresses."""
    def one(match: re.Match[str]) -> str:
        index = int(match.group(1))
        if index >= len(nodes):
            raise RankError(f"the plan names node {index}, the allocation has {len(nodes)} nodes")
        return nodes[index][1 if match.group(2) else 0]

    return PLACEHOLDER.sub(one, text)


def visible_gpus(planned: str, from_slurm: str | None) -> str:
    """The plan's GPU indexes on the node ("0,1"), as the physical ids Slurm gave the step when it set
    CUDA_VISIBLE_DEVICES ("4,5,6,7" -> "4,5"); "" for a CPU task."""
    if not planned:
        return ""
    visible = [g for g in (from_slurm or "").split(",") if g]
    if not visible or from_slurm == "NoDevFiles":
        return planned
    wanted = [int(i) for i in planned.split(",")]
    if max(wanted) >= len(visible):
        raise RankError(f"the plan gives this task GPU {max(wanted)}, Slurm gave the step {len(visible)} "
                        f"(CUDA_VISIBLE_DEVICES={from_slurm})")
    return ",".join(visible[i] for i in wanted)


def _scontrol(*args: str) -> str:
    res = subprocess.run(["scontrol", *args], capture_output=True, text=True, check=False)
    if res.returncode != 0:
        raise RankError(f"scontrol {' '.join(args)}: {res.stderr.strip() or f'exit {res.returncode}'}")
    return res.stdout


def allocation_nodes(environ: dict[str, str], count: int) -> list[tuple[str, str]]:
    nodelist = environ.get("SLURM_JOB_NODELIST")
    if not nodelist:
        raise RankError("SLURM_JOB_NODELIST is not set: submit this script with sbatch")
    names = sorted(_scontrol("show", "hostnames", nodelist).split())
    if len(names) != count:
        raise RankError(f"the allocation has {len(names)} nodes ({nodelist}), the plan {count}")
    addresses = parse_node_addresses(_scontrol("show", "node", "-o", ",".join(names)))
    return [(name, addresses.get(name, name)) for name in names]


def _write_run_file(run_dir: str, run_id: str, plan: dict[str, Any], rank: int) -> None:
    for sub in ("logs", "events", "state"):
        os.makedirs(os.path.join(run_dir, sub), exist_ok=True)
    temporary = os.path.join(run_dir, f".run.json.{rank}")  # ranks on one node write it at once
    with open(temporary, "w", encoding="utf-8") as f:
        json.dump({"run_id": run_id, "created": time.time(), "plan": plan}, f)
    os.replace(temporary, os.path.join(run_dir, "run.json"))


def tfcluster_lib(run_dir: str, package: str, needed: bool) -> str | None:
    """`<run dir>/lib/`, laid out as on tfcluster's own hosts: `package` (the name the plan's built-in command
    runs tfcluster's package under) and `tfcluster_report.py`, here links to the `training` package this
    python has installed (found outside the submit dir, where a user's own `training/` may be). None when
    tfcluster is not installed and nothing `needed` it (a user's command)."""
    import importlib.util

    saved = sys.path
    sys.path = [p for p in sys.path if p not in ("", os.getcwd())]
    try:
        spec = importlib.util.find_spec("training")
    finally:
        sys.path = saved
    where = list(spec.submodule_search_locations or []) if spec is not None else []
    installed = [p for p in where if os.path.isfile(os.path.join(p, "launcher.py"))]
    if not installed:
        if needed:
            raise RankError(f"tfcluster is not installed for {sys.executable}: the built-in models run its package")
        return None
    lib = os.path.join(run_dir, "lib")
    os.makedirs(lib, exist_ok=True)
    for name, target in ((package, installed[0]),
                         ("tfcluster_report.py", os.path.join(installed[0], "public", "tfcluster_report.py"))):
        with contextlib.suppress(FileExistsError):  # the other ranks on this node make the same links
            os.symlink(target, os.path.join(lib, name))
    return lib


def run_rank(environ: dict[str, str]) -> int:
    job = decode_job(environ.get(PLAN_ENV, ""))
    nodes = parse_nodes(environ.get(NODES_ENV, ""))
    rank = int(environ.get("SLURM_PROCID", "-1"))
    name = nodes[node_of_rank(job["tasks_per_node"], rank)][0] if nodes else "?"
    here = environ.get("SLURMD_NODENAME", "")
    if here != name:
        raise RankError(f"rank {rank} runs on node {here or '?'}, the plan puts it on {name}: run the script "
                        "with sbatch as exported (its srun places every rank)")
    plan = json.loads(substitute(json.dumps(job["plan"]), nodes))
    task = plan["tasks"][rank]
    label = f"{task['job']}:{task['index']}"
    run_id = f"{job['run_name']}-slurm-{environ.get('SLURM_JOB_ID', '0')}"
    host = next(h for h in plan["hosts"] if h["name"] == name)
    run_dir = os.path.join(os.path.expanduser(host["workdir"]), "runs", run_id, name)
    _write_run_file(run_dir, run_id, plan, rank)
    env = dict(environ)
    env.update(task["env"])
    if "TF_CONFIG" in task.get("derived", ()):
        tf_config = {"cluster": plan["cluster_spec"], "task": {"type": task["job"], "index": task["index"]}}
        env["TF_CONFIG"] = json.dumps(tf_config, separators=(",", ":"))
    env["CUDA_VISIBLE_DEVICES"] = visible_gpus(task["cuda_visible_devices"], environ.get("CUDA_VISIBLE_DEVICES"))
    env["TFCLUSTER_RUN_DIR"] = run_dir
    builtin = not plan["uses_user_command"]
    package = task["command"][2].partition(".")[0] if builtin else "_tfcluster_training"  # `python -m <package>.task`
    lib = tfcluster_lib(run_dir, package, needed=builtin)
    if lib is not None:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (lib, environ.get("PYTHONPATH")) if p)
    cwd = run_dir if builtin else environ.get("SLURM_SUBMIT_DIR", run_dir)
    log_path = os.path.join(run_dir, "logs", f"{task['job']}-{task['index']}.log")
    print(f"tfcluster: rank {rank} is {label} on {name}, log {log_path}", flush=True)
    if signalled:
        return _ended(label, signalled[0], None)
    with open(log_path, "ab") as log:  # a caught signal is reset to its default in the task (exec)
        children.append(subprocess.Popen(task["command"], env=env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=log,
                                         stderr=subprocess.STDOUT, start_new_session=True))
    return _follow(children[0], plan, task, label, environ)


# Set by `forward`, installed before anything else: the signals this rank got, and its task once started.
signalled: list[int] = []
children: list[subprocess.Popen[bytes]] = []


def forward(signum: int, frame: object) -> None:
    signalled.append(signum)
    for child in children:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child.pid, signal.SIGTERM if signum == END_SIGNAL else signum)


def _ignore_ending_signals() -> None:
    """From here on this rank's end is decided: the step's signal, possibly still on its way (a worker that
    finished as the chief did), must not kill it, and Python puts their default, deadly action back while it
    exits. A rank killed by one fails the job (srun's --kill-on-bad-exit)."""
    for ending in ENDING_SIGNALS:
        signal.signal(ending, signal.SIG_IGN)


def _ended(label: str, signum: int, code: int | None) -> int:
    """Ended by the run or by Slurm: exit 0."""
    _ignore_ending_signals()
    print(f"tfcluster: {label} ended by signal {signum}" + ("" if code is None else f" (exit {code})"), flush=True)
    return 0


def _follow(child: subprocess.Popen[bytes], plan: dict[str, Any], task: dict[str, Any], label: str,
            environ: dict[str, str]) -> int:
    # Ended but not reaped: its pid, and so its group's id, stay reserved while `forward` may signal the group.
    # Once reaped the number may be any new group's (another job's, the user's shell), so no signal goes there.
    with contextlib.suppress(ChildProcessError):
        os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)
    children.clear()
    _ignore_ending_signals()  # the task has ended, by itself or by a signal this rank forwarded
    code = child.wait()
    # The step's signal may reach the task before its rank: killed by it, or a shell's 128 + its number.
    by_signal = -code if code < 0 else code - 128
    if signalled or by_signal in ENDING_SIGNALS:
        return _ended(label, (signalled or [by_signal])[0], code)
    ends_the_run = task.get("is_chief") and (
        plan["training"].get("success", "chief") == "chief" or plan["mode"] in CLIENT_CHIEF_MODES)
    if code == 0 and ends_the_run:
        step = f"{environ.get('SLURM_JOB_ID')}.{environ.get('SLURM_STEP_ID')}"
        print(f"tfcluster: {label} finished: ending the other tasks (step {step})", flush=True)
        subprocess.run(["scancel", "--signal=USR1", step], check=False)  # END_SIGNAL
        return 0
    print(f"tfcluster: {label} exited {code}", flush=True)
    return code if code >= 0 else 128 - code


def main(argv: list[str]) -> int:
    environ = dict(os.environ)
    os.umask(0o077)  # run.json, logs and events are private from their first byte
    try:
        job = decode_job(environ.get(PLAN_ENV, ""))
        if argv[1:] == ["nodes"]:
            nodes = allocation_nodes(environ, len(job["tasks_per_node"]))
            sys.stdout.write("".join(f"{name} {address}\n" for name, address in nodes))
            return 0
        if argv[1:] == ["hostfile"]:
            nodes = parse_nodes(environ.get(NODES_ENV, ""))
            names = [nodes[i][0] for i, count in enumerate(job["tasks_per_node"]) for _ in range(count)]
            sys.stdout.write("".join(name + "\n" for name in names))
            return 0
        if argv[1:] == ["run"]:
            for signum in ENDING_SIGNALS:  # srun starts the rank with END_SIGNAL ignored until now
                signal.signal(signum, forward)
            return run_rank(environ)
        raise RankError(f"usage: {argv[0]} nodes|hostfile|run")
    except (RankError, OSError, KeyError, IndexError, ValueError) as exc:
        sys.stderr.write(f"tfcluster rank {environ.get('SLURM_PROCID', '?')}: {exc}\n")
        return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
