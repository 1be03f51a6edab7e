"""The hosts.toml schema: a strict pydantic model of the user's cluster description.

Loading and error reporting live in `orchestrator.config.load`; this module is the schema only, so the
plan, the CLI and the tests share one definition of every key. The machines are either `[[hosts]]` or a
Slurm job, `[slurm]` (orchestrator.config.slurm_schema), never both.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from orchestrator.config.kinds import HostTransport, SSHClient
from orchestrator.config.modes import Mode
from orchestrator.config.slurm_schema import SlurmSection, custom_error
from orchestrator.config.strict import Strict

Role = Literal["ps", "worker", "chief"]
HostKeyPolicy = Literal["yes", "accept-new", "no"]
Port = Annotated[int, Field(ge=1, le=65535)]
# Strings that reach a remote shell or the file system: printable, one line (a newline would silently
# split a command or land a path elsewhere). Quoting makes every other character safe.
OneLine = Annotated[str, Field(pattern=r"^[^\x00-\x1f\x7f]*$")]
EnvName = Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")]
EnvValue = Annotated[str, Field(pattern=r"^[^\x00]*$")]
# Set by the plan for every task; a user's env may not replace them (TF_CPP_MIN_LOG_LEVEL may).
RESERVED_ENV = ("TF_CONFIG", "CUDA_VISIBLE_DEVICES", "PYTHONUNBUFFERED")
RESERVED_ENV_PREFIX = "TFCLUSTER_"


class ClusterSection(Strict):
    name: str = "tfcluster"
    mode: Mode = "between-graph"
    base_port: Annotated[int, Field(ge=1024, le=65535)] = 23000
    # TF's gRPC server binds every interface; warn when the cluster addresses are not private/loopback.
    allow_public: bool = False


class SSHOptions(Strict):
    """SSH settings; `[ssh]` gives defaults, `[hosts.ssh]` overrides them per host. None = not set here."""

    # The strings below also reach the system's `ssh` (client = "openssh"): one line each.
    user: OneLine | None = None
    port: Port | None = None
    identity_file: OneLine | None = None
    strict_host_key_checking: HostKeyPolicy | None = None
    known_hosts: OneLine | None = None
    connect_timeout: Annotated[float, Field(gt=0, le=600)] | None = None
    keepalive: Annotated[int, Field(ge=0, le=3600)] | None = None
    proxy_jump: OneLine | None = None
    use_agent: bool | None = None
    config_file: OneLine | None = None  # ~/.ssh/config by default; "none" disables it
    # Which SSH client carries the commands (orchestrator.config.kinds): "paramiko" (default) or "openssh".
    client: SSHClient | None = None
    # openssh: seconds a shared connection (ControlMaster) outlives its last command; 0 = none shared.
    control_persist: Annotated[int, Field(ge=0, le=86400)] | None = None


def _check_env(env: dict[str, str] | None) -> dict[str, str] | None:
    for name in env or {}:
        if name in RESERVED_ENV or name.startswith(RESERVED_ENV_PREFIX):
            raise ValueError(f"`{name}` is set by tfcluster for every task and cannot be given here")
    return env


class RemoteSection(Strict):
    python: Annotated[OneLine, Field(min_length=1)] = "python3"
    workdir: Annotated[OneLine, Field(min_length=1)] = "~/.tfcluster"
    # false: tfcluster's commands run under /bin/sh (no startup files); true: under `$SHELL -l` (the
    # user's profile: `module load`, conda activate), paid on every command.
    login_shell: bool = False


class HostConfig(Strict):
    name: Annotated[str, Field(min_length=1, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")]
    address: Annotated[str, Field(min_length=1)]
    roles: Annotated[list[Role], Field(min_length=1)]
    gpus: list[Annotated[int, Field(ge=0, le=63)]] | None = None
    # GPUs each GPU task of this host sees (a divisor of len(gpus)); None: 1, or all of them in
    # multi-worker-mirrored mode (orchestrator.config.rules.gpus_per_task).
    gpus_per_task: Annotated[int, Field(ge=1, le=64)] | None = None
    workers: Annotated[int, Field(ge=1, le=64)] | None = None
    transport: HostTransport = "ssh"
    ssh: SSHOptions | None = None
    # Per-host overrides of [remote]: loopback "machines" share one filesystem and need their own workdir.
    python: Annotated[OneLine, Field(min_length=1)] | None = None
    workdir: Annotated[OneLine, Field(min_length=1)] | None = None
    env: dict[EnvName, EnvValue] | None = None  # added to [training] env for this host's tasks (wins)

    _env_names = field_validator("env")(classmethod(lambda cls, v: _check_env(v)))

    @field_validator("roles")
    @classmethod
    def _roles_unique(cls, roles: list[Role]) -> list[Role]:
        for i, role in enumerate(roles):
            if role in roles[:i]:
                raise ValueError(f"role `{role}` is listed twice")
        return roles

    @field_validator("gpus")
    @classmethod
    def _gpus_unique(cls, gpus: list[int] | None) -> list[int] | None:
        if gpus is not None:
            seen: set[int] = set()
            for g in gpus:
                if g in seen:
                    raise ValueError(f"GPU index {g} is given twice")
                seen.add(g)
        return gpus

    @model_validator(mode="after")
    def _gpus_xor_workers(self) -> HostConfig:
        if self.gpus and self.workers is not None:
            raise ValueError("give either `gpus` (one worker per GPU) or `workers` (CPU workers), not both")
        return self


class TrainingSection(Strict):
    model: str = "mlp"  # a built-in model name, or "package.module:build" for the user's own
    model_args: dict[str, int | float | str | bool] = Field(default_factory=dict)
    command: OneLine | None = None  # the user's own program, run once per task with placeholders filled
    sync: list[str] = Field(default_factory=list)  # files/dirs shipped with the user's program
    batch_size: Annotated[int, Field(ge=1, le=1 << 20)] = 128
    steps: Annotated[int, Field(ge=1)] = 1000
    learning_rate: Annotated[float, Field(gt=0)] = 0.05
    optimizer: Literal["sgd", "adam", "adagrad", "momentum"] = "sgd"
    sync_replicas: bool = False  # between-graph: SyncReplicasOptimizer instead of async updates
    replicas_to_aggregate: Annotated[int, Field(ge=1)] | None = None
    backup_workers: Annotated[int, Field(ge=0)] = 0
    input: Literal["client", "worker"] = "client"  # in-graph: who produces each tower's data
    checkpoint_dir: str = "checkpoints"  # relative to the run dir on the chief, or a shared absolute path
    shared_checkpoint_dir: bool = False  # true: every PS writes its shard there (needs a shared filesystem)
    # Both, whichever comes first: a PS lost early in a run costs little (steps), a slow run still saves (time).
    checkpoint_every_steps: Annotated[int, Field(ge=1)] | None = 500
    checkpoint_every_secs: Annotated[float, Field(gt=0)] | None = 60.0
    summary_every_steps: Annotated[int, Field(ge=1)] = 100
    # Where the user's own program writes TensorBoard event files: relative to its working directory (the
    # run's code/ dir on each host) or absolute. `tfcluster tensorboard` and `pull --summaries` read it there.
    logdir: Annotated[OneLine, Field(min_length=1)] | None = None
    progress_interval: Annotated[float, Field(gt=0, le=60)] = 1.0
    slowdown: dict[str, Annotated[float, Field(ge=1.0, le=1000.0)]] = Field(default_factory=dict)
    restart: Literal["never", "on-failure"] = "on-failure"
    max_restarts: Annotated[int, Field(ge=0, le=1000)] = 3
    # A task that ran healthily this long gets its restart budget back (Kubernetes' back-off reset).
    restart_window: Annotated[float, Field(gt=0, le=7 * 86400)] = 600.0
    # Each task's log is rotated past this size (one older part kept, `<job>-<task>.log.1`): a task printing
    # 20 MB/s once filled a disk. Generous (fractions allowed): a log is where a failure is explained.
    max_log_mb: Annotated[float, Field(ge=0.01, le=1024 * 1024)] = 1024.0  # 10 KB at least: a note fits
    # When the run has succeeded (Kubeflow TFJob's success policy): "chief" = the chief (worker 0 without
    # a chief) exited 0; "all-workers" = every worker (and the chief) exited 0.
    success: Literal["chief", "all-workers"] = "chief"
    progress_pattern: str | None = None  # a regex over each line a task prints (see hosts.example.toml)
    env: dict[EnvName, EnvValue] = Field(default_factory=dict)  # for every task; TF_CPP_MIN_LOG_LEVEL wins here
    forward_env: list[EnvName] = Field(default_factory=list)  # copied from your environment at start, never stored
    seed: int = 0

    _env_names = field_validator("env")(classmethod(lambda cls, v: _check_env(v)))

    @field_validator("forward_env")
    @classmethod
    def _forward_names(cls, names: list[str]) -> list[str]:
        _check_env(dict.fromkeys(names, ""))
        return names

    @field_validator("progress_pattern")
    @classmethod
    def _pattern(cls, pattern: str | None) -> str | None:
        from training.progress.lines import pattern_error

        if pattern is not None and (why := pattern_error(pattern)):
            raise ValueError(why)
        return pattern

    @field_validator("slowdown")
    @classmethod
    def _slowdown_keys(cls, slowdown: dict[str, float]) -> dict[str, float]:
        for key in slowdown:
            job, _, index = key.partition(":")
            if job not in ("worker", "chief") or not index.isdigit():
                raise ValueError(f'slowdown key "{key}" must look like "worker:1" or "chief:0"')
        return slowdown


class Config(Strict):
    cluster: ClusterSection = Field(default_factory=ClusterSection)
    ssh: SSHOptions = Field(default_factory=SSHOptions)
    remote: RemoteSection = Field(default_factory=RemoteSection)
    hosts: Annotated[list[HostConfig], Field(min_length=1, default_factory=list)]
    slurm: SlurmSection | None = None  # a Slurm job instead of [[hosts]]
    training: TrainingSection = Field(default_factory=TrainingSection)

    @model_validator(mode="after")
    def _hosts_or_slurm(self) -> Config:
        if self.slurm is not None and "hosts" in self.model_fields_set:
            raise custom_error("a file describes its machines with [[hosts]] or a Slurm job with [slurm], never "
                               "both: remove one of them", key="slurm")
        if self.slurm is None and not self.hosts:
            raise custom_error("no [[hosts]] table: describe at least one machine (see hosts.example.toml), or "
                               "a Slurm job in a [slurm] section", key="hosts")
        return self


SSH_DEFAULTS = SSHOptions(
    port=22,
    strict_host_key_checking="yes",
    connect_timeout=10.0,
    keepalive=15,
    use_agent=True,
    client="paramiko",
    control_persist=60,
)
