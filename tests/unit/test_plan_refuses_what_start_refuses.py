"""`tfcluster plan` refuses every hosts.toml that `tfcluster start` refuses, with the same line and exit 2.

Both commands run through the real entry point (python -m tfcluster) on the same files. The base file
works: two `transport = "local"` hosts on this machine, a ps and a worker running `sleep`, and a synced
file; `start` really starts it (and the test stops it). Each bad file breaks it in one place, one kind of
refusal each; `start` is really attempted on each, and must refuse before anything starts: no run record,
nothing on stdout.

What only the hosts can tell is `start`'s alone, and `plan` passes it: a planned port another process
holds on a host (below, with a real listening socket), a host that cannot be reached, a Python or
TensorFlow missing there (`tfcluster check` asks the hosts). So is a [slurm] job, which `plan` lays out
and `start` cannot run yet (Slurm phase 2).
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from orchestrator.run.local_ports import free_port_block
from tests.integration.lifecycle_helpers import unique_run_id

REPO = Path(__file__).resolve().parents[2]
UNSET = "PARITY_TEST_NEVER_SET"  # TFCLUSTER_* names are tfcluster's own: refused for another reason
SLURM = '[cluster]\nname = "parity"\n\n[slurm]\nnodes = 1\nworkers = 1\n'


def base(tmp_path: Path, base_port: int) -> str:
    """A cluster that starts: ps:0 on m0, worker:0 on m1, both `sleep` on this machine."""
    return (
        f'[cluster]\nname = "parity"\nbase_port = {base_port}\n\n'
        f'[remote]\npython = {json.dumps(sys.executable)}\nworkdir = {json.dumps(str(tmp_path / "work"))}\n\n'
        '[[hosts]]\nname = "m0"\naddress = "127.0.0.1"\ntransport = "local"\nroles = ["ps"]\n\n'
        '[[hosts]]\nname = "m1"\naddress = "127.0.0.1"\ntransport = "local"\nroles = ["worker"]\n\n'
        '[training]\ncommand = "sleep 60"\nsync = ["train.py"]\n'
    )


def edit(old: str, new: str) -> Callable[[str], str]:
    def apply(text: str) -> str:
        assert old in text, old
        return text.replace(old, new, 1)
    return apply


def add(lines: str) -> Callable[[str], str]:
    return lambda text: text + lines


def model(lines: str) -> Callable[[str], str]:
    """The built-in trainer instead of the user's command, with these [training] lines."""
    return edit('command = "sleep 60"\n', lines)


WORKER = 'name = "m1"\naddress = "127.0.0.1"\ntransport = "local"\nroles = ["worker"]\n'
BAD_FILES: list[tuple[str, Callable[[str], str], str]] = [
    ("toml-syntax", add("steps = \n"), "TOML syntax error"),
    ("unknown-key", edit(WORKER, WORKER + "gpu = [0]\n"), "hosts[1].gpu: unknown key `gpu` (did you mean `gpus`?)"),
    ("bad-value", edit(WORKER, WORKER + "workers = 0\n"), "hosts[1].workers: `workers` 0 is out of range"),
    ("gpus-per-task-without-gpus", edit(WORKER, WORKER + "gpus_per_task = 2\n"),
     "hosts[1].gpus_per_task: gpus_per_task = 2 but `m1` lists no GPU"),
    ("gpus-per-task-not-a-divisor", edit(WORKER, WORKER + "gpus = [0, 1, 2]\ngpus_per_task = 2\n"),
     "hosts[1].gpus_per_task: gpus_per_task = 2 does not divide the 3 GPUs `m1` lists"),
    ("gpus-per-task-for-a-ps", edit('roles = ["ps"]\n', 'roles = ["ps"]\ngpus = [0]\ngpus_per_task = 1\n'),
     "hosts[0].gpus_per_task: `m0` runs only a ps task, and ps tasks never get GPUs"),
    ("mirrored-unequal-gpus", lambda text: text.replace('roles = ["ps"]', 'roles = ["worker"]\ngpus = [0, 1]')
     .replace('name = "parity"', 'name = "parity"\nmode = "multi-worker-mirrored"'),
     "hosts[0].gpus_per_task: multi-worker-mirrored needs as many replicas in every task"),
    ("reserved-env", add('env = { TF_CONFIG = "{}" }\n'), "`TF_CONFIG` is set by tfcluster for every task"),
    ("host-name-twice", edit('name = "m1"', 'name = "m0"'), "hosts[1].name: host name `m0` is already used"),
    ("one-machine-twice", lambda text: text.replace('transport = "local"', 'transport = "ssh"')
     + '\n[ssh]\nconfig_file = "none"\n', "hosts[1].address: host `m1` has the same SSH address and port"),
    ("no-ps", edit('roles = ["ps"]', 'roles = ["worker"]'), "between-graph mode needs a parameter server"),
    ("unknown-model", model('model = "mpl"\n'), "training.model: unknown model `mpl`"),
    ("model-args", model('model = "wide"\nmodel_args = { shards = 0 }\n'), "training.model_args.shards:"),
    ("unknown-placeholder", edit("sleep 60", "sleep {task_index}"), "unknown placeholder {task_index}"),
    ("placeholder-context", edit("sleep 60", "sleep $(( {ps_hosts} ))"), "placeholder {ps_hosts} inside arithmetic"),
    ("slowdown-of-no-task", add('slowdown = { "worker:5" = 2.0 }\n'), "the plan has no task worker:5"),
    ("backup-workers", add("sync_replicas = true\nbackup_workers = 1\n"), "training.backup_workers:"),
    ("no-room-for-ports", lambda text: re.sub(r"base_port = \d+", "base_port = 65534", text),
     "cluster.base_port: base_port 65534 leaves no room"),
    ("sync-entry-missing", edit('sync = ["train.py"]', 'sync = ["train.py", "data/"]'), "'data/' does not exist"),
    ("forward-env-unset", add(f'forward_env = ["{UNSET}"]\n'), f"{UNSET} is not set in your environment"),
    ("slurm-bad-value", lambda _: SLURM + 'time = "1h"\n', "slurm.time: `1h` is not a Slurm time limit"),
    ("slurm-rule", lambda _: SLURM.replace("nodes = 1", "nodes = 3"), "slurm.nodes: nodes = 3 but the job has 2 tasks"),
    ("slurm-gpus-per-task", lambda _: SLURM + "gpus_per_node = 4\ngpus_per_task = 3\n",
     "slurm.gpus_per_task: gpus_per_task = 3 does not divide gpus_per_node = 4"),
    ("hosts-and-slurm", add("\n[slurm]\nnodes = 1\nworkers = 1\n"), "slurm: a file describes its machines with"),
]


def tfcluster(*args: str) -> subprocess.CompletedProcess[str]:
    return tfclusters(args)[0]


def tfclusters(*commands: tuple[str, ...]) -> list[subprocess.CompletedProcess[str]]:
    """The CLI commands, each in its own process, side by side; TFCLUSTER_STATE_DIR (the state_dir
    fixture's) comes with os.environ."""
    env = {**{k: v for k, v in os.environ.items() if k != UNSET}, "COLUMNS": "200"}
    procs = [subprocess.Popen([sys.executable, "-m", "tfcluster", *args], cwd=REPO, env=env, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE) for args in commands]
    outputs = [proc.communicate(timeout=120) for proc in procs]
    return [subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
            for proc, (out, err) in zip(procs, outputs, strict=True)]


def write(tmp_path: Path, text: str) -> Path:
    (tmp_path / "train.py").write_text("print('never run: the command is sleep')\n")
    path = tmp_path / "hosts.toml"
    path.write_text(text)
    return path


def runs(state_dir: Path) -> list[str]:
    return sorted(p.name for p in (state_dir / "runs").glob("*.json")) if (state_dir / "runs").exists() else []


def test_the_base_file_plans_and_starts(tmp_path: Path, state_dir: Path) -> None:
    hosts = write(tmp_path, base(tmp_path, free_port_block(4)))
    assert tfcluster("plan", str(hosts)).returncode == 0
    started = tfcluster("start", str(hosts), "--run", "parity")
    assert started.returncode == 0, started.stderr
    assert tfcluster("stop", "parity").returncode == 0


@pytest.mark.parametrize(("kind", "breaking", "fragment"), BAD_FILES, ids=[case[0] for case in BAD_FILES])
def test_plan_and_start_refuse_with_the_same_line(tmp_path: Path, state_dir: Path, kind: str,
                                                  breaking: Callable[[str], str], fragment: str) -> None:
    hosts = write(tmp_path, breaking(base(tmp_path, free_port_block(4))))
    plan, start = tfclusters(("plan", str(hosts)), ("start", str(hosts)))
    assert (plan.returncode, start.returncode) == (2, 2), (plan.stderr, start.stderr)
    assert plan.stderr == start.stderr
    assert re.fullmatch(rf"error: {re.escape(str(hosts))}:\d+: .*\n", plan.stderr), plan.stderr
    assert fragment in plan.stderr, plan.stderr
    assert plan.stdout == start.stdout == ""
    assert runs(state_dir) == []  # nothing half-started: not even a run record


def test_a_users_own_training_package_is_taken_by_both(tmp_path: Path, state_dir: Path) -> None:
    """`model = "training.mine:build"`: a module named like tfcluster's own package. tfcluster's ships to
    the hosts as _tfcluster_training, so the user's `training/` (synced) is theirs: both accept it."""
    text = model('model = "training.mine:build"\n')(base(tmp_path, free_port_block(4)))
    hosts = write(tmp_path, text.replace('sync = ["train.py"]', 'sync = ["training"]'))
    (tmp_path / "training").mkdir()
    (tmp_path / "training" / "__init__.py").write_text("")
    (tmp_path / "training" / "mine.py").write_text(
        "import tensorflow as tf\n\n\ndef build(features, labels):\n"
        "    logits = tf.keras.layers.Dense(10)(features)\n"
        "    return tf.compat.v1.losses.sparse_softmax_cross_entropy(labels, logits)\n")
    assert tfcluster("plan", str(hosts)).returncode == 0
    run_id = unique_run_id("own-training")
    started = tfcluster("start", str(hosts), "--run", run_id)
    assert started.returncode == 0, started.stderr
    assert tfcluster("stop", run_id).returncode == 0


def test_only_the_hosts_can_tell_a_port_is_taken(tmp_path: Path, state_dir: Path) -> None:
    base_port = free_port_block(4)
    hosts = write(tmp_path, base(tmp_path, base_port))
    with socket.socket() as holder:  # ps:0's port, held by this test: another process, to the CLI
        holder.bind(("127.0.0.1", base_port))
        holder.listen()
        assert tfcluster("plan", str(hosts)).returncode == 0
        start = tfcluster("start", str(hosts))
    assert start.returncode == 2  # after connecting and shipping: the progress lines come before the error
    assert start.stderr.splitlines()[-1] == (
        f"error: host m0: port {base_port} (ps:0) is in use by another process; nothing was started (another run "
        "on these hosts? use `tfcluster start --auto-ports` or another [cluster] base_port)")


def test_a_slurm_job_is_planned_then_start_asks_slurm(tmp_path: Path, state_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A valid [slurm] file: `plan` shows it, `start` submits it, and only Slurm can refuse it then (here no
    Slurm is configured: sbatch says so, named); `check` refuses it in one line (it cannot probe nodes that
    do not exist yet). The Slurm runs themselves: tests/integration/test_slurm_lifecycle.py."""
    # An empty slurm.conf: Slurm refuses it at once (a missing one, sbatch retries for up to 60 s first).
    (tmp_path / "slurm.conf").touch()
    monkeypatch.setenv("SLURM_CONF", str(tmp_path / "slurm.conf"))
    hosts = write(tmp_path, SLURM)
    assert tfcluster("plan", str(hosts)).returncode == 0
    start = tfcluster("start", str(hosts))
    assert start.returncode != 0 and "sbatch" in start.stderr, start.stderr
    check = tfcluster("check", str(hosts))
    assert check.returncode == 2
    assert check.stderr.startswith(f"error: {hosts}:4: slurm: `check` does not probe a [slurm] job's nodes")
