"""A Config -> a `ValidConfig`, in one pass, the only one: every refusal of `start` that the hosts themselves
do not decide happens here, so `plan` refuses it too, with the same line (orchestrator.config.load adds it).

`validate` holds the Config to every rule over several keys (orchestrator.config.rules), then to what this
machine says: each SSH host resolved as OpenSSH would (orchestrator.config.ssh_config: the cluster spec
gets the HostName an alias stands for, since the tasks dial each other directly; two entries that are one
machine are refused), every `[training] sync` entry found, every `forward_env` variable set. The plan is
then built from the ValidConfig (orchestrator.plan) without a check of its own. What only the hosts can
tell (a port taken, a host down, a missing Python or TensorFlow) is for `start` and `check` to find.
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from orchestrator.config.modes import TRAINING_CHIEF_MODES
from orchestrator.config.rules import Tasks, check_rules, gpus_per_task
from orchestrator.config.schema import Config, SSHOptions
from orchestrator.config.slurm_schema import option_name
from orchestrator.config.ssh_config import HostsSSH, resolve_hosts, resolve_ssh
from orchestrator.errors import ConfigError

Machines = Literal["hosts", "slurm"]  # what a command runs on: [[hosts]], or a [slurm] job
SLURM_NOT_YET = ("`check` does not probe a [slurm] job's nodes (they are known only once the job runs): `tfcluster "
                 "plan` shows its layout, `tfcluster start` runs it")
NO_SLURM = ("no [slurm] section: `tfcluster export slurm` needs a Slurm job described in [slurm] (see "
            "hosts.example.toml)")


@dataclass(frozen=True)
class ValidConfig:
    """A Config that holds every rule, with what checking it worked out; the plan's only input."""

    config: Config
    source: str  # the file it came from, as errors name it
    tasks: Tasks
    ssh: Mapping[str, SSHOptions]  # host name -> what hosts.toml says of its SSH ([ssh] < [hosts.ssh])
    dial: Mapping[str, str]  # SSH host name -> where the other tasks dial it (an ssh-config alias's HostName)
    warnings: tuple[str, ...]


def validate(config: Config, source: str = "hosts.toml", machines: Machines | None = None) -> ValidConfig:
    """`config` held to every rule and to this machine's facts, for a command that runs on `machines`.
    `source` names the file it came from: errors name it, and `sync` paths start in its directory (as
    `start` ships them). Errors carry key paths; orchestrator.config.load adds the lines."""
    tasks = check_rules(config, source)
    ssh = resolve_hosts(config, source)
    sync_sources(config.training.sync, os.path.dirname(os.path.abspath(source)), source)
    check_forward_env(config.training.forward_env, source)
    if machines is None and config.slurm is not None:
        check_slurm_start(config, source)
    # Last: a file any command refuses is refused with the same line by every command.
    if machines == "hosts" and config.slurm is not None:
        raise ConfigError(source, "slurm", SLURM_NOT_YET)
    if machines == "slurm" and config.slurm is None:
        raise ConfigError(source, "slurm", NO_SLURM)
    dial = {name: r.hostname for name, r in ssh.resolved.items()}
    return ValidConfig(config, source, tasks, ssh.explicit, dial, tuple(plan_warnings(config, ssh, dial)))


def check_slurm_start(config: Config, source: str) -> None:
    """What `start` of a [slurm] job needs beyond its layout (`plan` refuses it too; `export slurm` does not
    need it): no `--requeue` (start submits with --no-requeue: a job Slurm requeued would start over behind
    its supervisors' backs), and `login` resolved as OpenSSH would (an unusable ssh config is an error now)."""
    assert config.slurm is not None
    if any(option_name(word) == "--requeue" for word in config.slurm.sbatch_args):
        raise ConfigError(source, "slurm.sbatch_args", "--requeue: `tfcluster start` submits with --no-requeue (a "
                          "job Slurm requeued would start over behind its supervisors, which restart its tasks "
                          "themselves); `tfcluster export slurm` keeps it")
    if config.slurm.login:
        try:
            resolve_ssh(config.slurm.login, config.ssh)
        except ConfigError as exc:
            raise ConfigError(source, "slurm.login", exc.message, suggestion=exc.suggestion) from None


def plan_warnings(config: Config, ssh: HostsSSH, dial: Mapping[str, str]) -> list[str]:
    """What a plan of these hosts says before it runs: keys it ignores, GPUs the built-in trainer leaves
    idle, unverified host keys, public addresses, and ssh-config aliases (the TF tasks dial the HostName
    instead, which every other machine of the cluster must then reach)."""
    out = []
    for h in config.hosts:
        trains_as_chief = "chief" in h.roles and config.cluster.mode in TRAINING_CHIEF_MODES
        if h.gpus and "worker" not in h.roles and not trains_as_chief:
            out.append(f"host {h.name}: `gpus` is ignored, only worker tasks (and a training chief) use GPUs")
        elif idle := idle_gpus(config, gpus_per_task(h, config.cluster.mode)):
            out.append(f"host {h.name}: {idle}")
        if h.workers is not None and "worker" not in h.roles:
            out.append(f"host {h.name}: `workers` is ignored, the host has no `worker` role")
        if ssh.explicit[h.name].strict_host_key_checking == "no" and h.transport == "ssh":
            out.append(
                f'host {h.name}: strict_host_key_checking = "no" accepts any host key, so a '
                "man-in-the-middle would go unnoticed; use \"accept-new\" once, then \"yes\""
            )
        address = dial.get(h.name, h.address)  # what the tasks dial: an alias's HostName, when known
        try:
            ip = ipaddress.ip_address(address)
        except ValueError:
            continue  # a DNS name: not resolved here
        if ip.is_global and not config.cluster.allow_public:
            out.append(
                f"host {h.name}: {address} is a public address and TensorFlow's gRPC server listens "
                "unauthenticated on every interface; firewall the task ports or set cluster.allow_public"
            )
    return out + [
        f"host {name}: `{r.alias}` is an ssh config alias for {r.hostname}; the cluster "
        f"spec uses {r.hostname}, which every other machine must be able to reach"
        for name, r in ssh.resolved.items() if r.hostname.lower() != r.alias.lower()
    ]


def idle_gpus(config: Config, per_task: int) -> str | None:
    """What a plan that gives each task `per_task` GPUs says of the ones its trainer leaves idle: the
    built-in between-graph trainer builds its one graph on its task's device (training/graph/between_graph.py)."""
    if per_task > 1 and config.cluster.mode == "between-graph" and config.training.command is None:
        return (f"each task sees {per_task} GPUs, but the built-in between-graph trainer computes on its GPU:0 "
                "only (in-graph and multi-worker-mirrored use them all)")
    return None


def sync_sources(sync: Iterable[str], base_dir: str, source: str = "hosts.toml") -> list[tuple[Path, str]]:
    """Each `[training] sync` entry: where it is on this machine (relative to `base_dir`), and the name it
    ships under in the host's code/ dir (its relative path; an entry outside `base_dir`, its own name)."""
    out = []
    for entry in sync:
        try:
            path = Path(entry).expanduser()
        except RuntimeError:  # `~name` of a user this machine does not know
            raise ConfigError(source, "training.sync", f"{entry!r}: no such user's home directory") from None
        full = path if path.is_absolute() else Path(base_dir) / path
        if not full.exists():
            raise ConfigError(source, "training.sync", f"{entry!r} does not exist (looked for {full})")
        outside = path.is_absolute() or ".." in path.parts
        out.append((full, full.resolve().name if outside else path.as_posix().rstrip("/")))
    return out


def check_forward_env(names: Iterable[str], source: str) -> None:
    """`[training] forward_env`: every name set in this process's environment. A run that silently lacks
    its API key fails later and further away."""
    missing = [name for name in names if name not in os.environ]
    if missing:
        raise ConfigError(source, "training.forward_env", f"{', '.join(missing)} "
                          f"{'is' if len(missing) == 1 else 'are'} not set in your environment")
