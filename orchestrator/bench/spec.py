"""What a bench runs: `BenchSpec`, and the parsers of its command-line values (one line, exit 2, on bad input).

`tfcluster bench HOSTS --modes ... --workers 1,2,4 --straggler worker:1=4 --kill worker:1@30s --resize
--repeat N` becomes one BenchSpec. Every value is checked here, before any cluster starts: a typo must not cost the
user the first cells of a long bench.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any, get_args

from orchestrator.config.modes import Mode
from orchestrator.errors import UsageError
from orchestrator.plan.names import task_name

ALL_MODES: tuple[Mode, ...] = get_args(Mode)
GBIT = 1e9 / 8  # bytes per second in one Gb/s
DEFAULT_NIC_GBPS = 10.0
DEFAULT_SECONDS = 30.0
DEFAULT_TARGET_LOSS = 0.6  # mlp starts near ln(10) = 2.3 (10 classes) and passes 0.6 after a few hundred steps

_TASK = re.compile(r"^(?P<job>worker|chief):(?P<index>\d+)$")
_DURATION = re.compile(r"^(?P<value>\d+(?:\.\d+)?)(?P<unit>s|m)?$")


@dataclass(frozen=True)
class TaskRef:
    job: str  # "worker" | "chief"
    index: int

    @property
    def name(self) -> str:
        return task_name(self.job, self.index)


@dataclass(frozen=True)
class Straggler:
    task: TaskRef
    factor: float  # the task's steps take this many times longer (training.cluster.straggler)


@dataclass(frozen=True)
class Kill:
    task: TaskRef
    at_s: float  # seconds into the cell's measured window


@dataclass(frozen=True)
class ResizeAt:
    """The resize variant's pace: a worker joins `at_s` into the measured window, leaves `at_s` after it
    stepped, and the window ends `at_s` after the run stepped again (orchestrator/bench/resize_cell.py)."""

    at_s: float


@dataclass(frozen=True)
class BenchSpec:
    hosts_file: str
    modes: tuple[Mode, ...] = ALL_MODES
    workers: tuple[int, ...] | None = None  # None: 1, 2, 4, ... up to every listed worker
    model: str | None = None  # None: hosts.toml's
    model_args: dict[str, int | float | str] = field(default_factory=dict)
    batch_size: int | None = None
    steps: int | None = None  # per cell; else `seconds` of measurement after the warm-up
    seconds: float = DEFAULT_SECONDS
    warmup_s: float = 5.0  # discarded after every trainer's first step
    straggler: Straggler | None = None
    pace: float = 1.0  # every trainer at this slowdown (idle share of each step), the straggler at pace x factor
    kill: Kill | None = None
    resize: ResizeAt | None = None
    repeat: int = 1
    nic_gbps: float = DEFAULT_NIC_GBPS  # per direction; replaced by a measurement with measure_nic
    measure_nic: bool = False
    target_loss: float = DEFAULT_TARGET_LOSS
    steps_per_sec: float | None = None  # the per-worker rate the PS advice aims for (None: 2x the measured)
    cell_timeout: float = 240.0  # start + first steps of every trainer

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def parse_modes(text: str) -> tuple[Mode, ...]:
    """`between-graph,in-graph` or `all`; unknown names are one line naming the valid ones."""
    if text.strip() in ("", "all"):
        return ALL_MODES
    out: list[Mode] = []
    for raw in text.split(","):
        name = raw.strip()
        match = next((m for m in ALL_MODES if m == name), None)
        if match is None:
            raise UsageError(f"--modes: unknown mode {name!r}; the modes are {', '.join(ALL_MODES)} (or all)")
        if match not in out:
            out.append(match)
    return tuple(out)


def parse_workers(text: str) -> tuple[int, ...]:
    """`1,2,4`: worker counts, each a subset (the first N) of the workers hosts.toml lists."""
    try:
        counts = sorted({int(p) for p in text.split(",") if p.strip()})
    except ValueError:
        raise UsageError(f"--workers {text!r}: give worker counts like 1,2,4") from None
    if not counts or counts[0] < 1:
        raise UsageError(f"--workers {text!r}: give worker counts of at least 1, like 1,2,4")
    return tuple(counts)


def parse_task(text: str, option: str) -> TaskRef:
    m = _TASK.match(text.strip())
    if m is None:
        raise UsageError(f"{option}: {text!r} is not a training task; write it like worker:1 or chief:0")
    return TaskRef(m.group("job"), int(m.group("index")))


def parse_straggler(text: str) -> Straggler:
    """`worker:1=4`: that task's steps take 4 times as long ([training] slowdown)."""
    task, sep, factor = text.partition("=")
    if not sep:
        raise UsageError(f"--straggler {text!r}: write it as TASK=FACTOR, like worker:1=4")
    try:
        value = float(factor)
    except ValueError:
        raise UsageError(f"--straggler {text!r}: the factor {factor!r} is not a number") from None
    if not 1.0 < value <= 1000.0:
        raise UsageError(f"--straggler {text!r}: the factor must be above 1 and at most 1000")
    return Straggler(parse_task(task, "--straggler"), value)


def parse_kill(text: str) -> Kill:
    """`worker:1@30s` (or @2m, or @30): SIGKILL that task 30 s into the measured window."""
    task, sep, when = text.partition("@")
    seconds = _seconds(when) if sep else None
    if seconds is None:
        raise UsageError(f"--kill {text!r}: write it as TASK@TIME, like worker:1@30s")
    return Kill(parse_task(task, "--kill"), seconds)


def parse_duration(text: str, option: str) -> float:
    """`20s`, `2m` or `20`: seconds, above 0."""
    seconds = _seconds(text)
    if seconds is None or seconds <= 0:
        raise UsageError(f"{option} {text!r}: give a time above 0, like 10s or 2m")
    return seconds


def _seconds(text: str) -> float | None:
    """`20s`, `2m` or `20` in seconds; None when it is not a time."""
    m = _DURATION.match(text.strip())
    return float(m.group("value")) * (60.0 if m.group("unit") == "m" else 1.0) if m else None


def parse_resize(enabled: bool, at: str | None, seconds: float) -> ResizeAt | None:
    """`--resize` (the join a third of `--seconds` into the window) or `--resize-at TIME` (implies it)."""
    if at is not None:
        return ResizeAt(parse_duration(at, "--resize-at"))
    return ResizeAt(seconds / 3) if enabled else None


def parse_model_args(pairs: list[str]) -> dict[str, int | float | str]:
    """`--model-arg params=20000000` (repeatable): numbers as numbers, the rest as text (`hidden=256,256`)."""
    out: dict[str, int | float | str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"--model-arg {pair!r}: write it as KEY=VALUE, like params=20000000")
        out[key.strip()] = _number_or_text(value.strip())
    return out


def _number_or_text(value: str) -> int | float | str:
    try:
        return int(value)
    except ValueError:
        pass
    try:
        number = float(value)
    except ValueError:
        return value
    return int(number) if number.is_integer() else number


def check_spec(spec: BenchSpec) -> None:
    """The checks that need several values at once."""
    if spec.repeat < 1:
        raise UsageError("--repeat must be at least 1")
    if spec.kill is not None and spec.steps is None and spec.kill.at_s >= spec.seconds:
        raise UsageError(f"--kill {spec.kill.task.name}@{spec.kill.at_s:g}s is after the end of each cell's "
                         f"measurement (--seconds {spec.seconds:g}): kill earlier or measure longer")
    if spec.pace < 1.0:
        raise UsageError("--pace must be at least 1 (1 = no pacing)")
    if spec.resize is not None and spec.steps is not None:
        raise UsageError("--resize measures seconds around each change: give --seconds (or --resize-at), not --steps")
    if spec.resize is not None and spec.pace > 1.0:
        # The paced trainers are named in [training] slowdown, which a resize may not change.
        raise UsageError("--resize with --pace: a resize keeps [training] as it is, and the pace names every "
                         "trainer in it: run the resize variant unpaced")
