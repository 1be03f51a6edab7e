"""The `[slurm]` section of hosts.toml: a Slurm job instead of `[[hosts]]`. Schema only (pydantic), with the
rules each key holds alone; the rules that need the mode or several keys are orchestrator.plan.slurm's.

Names as Slurm and TensorFlow users know them: the allocation (`nodes`, `partition`, `time`, `account`,
`qos`, `gpus_per_node`, `cpus_per_task`, `mem` per node, `sbatch_args` passed through as they are,
`login`: a host reached over `[ssh]` where sbatch runs), the TF job counts (`ps`, `workers`, `chief`) and
each task's share of its node's GPUs (`gpus_per_task`).
Every value that reaches sbatch (as an argv word, or on an `#SBATCH` line of a script) is validated
here: a `#SBATCH` line ends at a newline and is split at whitespace, so no value may hold either.
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import Field, field_validator
from pydantic_core import PydanticCustomError

from orchestrator.config.strict import Strict

# A Slurm partition, account or QOS name (Slurm allows more; these never need quoting anywhere).
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+-]*")
# sbatch --time: minutes, minutes:seconds, hours:minutes:seconds, days-hours, days-hours:minutes,
# days-hours:minutes:seconds; 0, UNLIMITED or INFINITE for none.
_TIME = re.compile(r"\d+(:\d{1,2}){0,2}|\d+-\d{1,2}(:\d{1,2}){0,2}|(?i:unlimited|infinite)")
_MEM = re.compile(r"\d+[KMGTkmgt]?")  # sbatch --mem: megabytes, or a K, M, G or T suffix
_UNSAFE_WORD = re.compile(r"[\s\"'\\\x00-\x1f\x7f]")

# sbatch options a key of this section sets (an sbatch_args word repeating one is refused, named).
OWNED_OPTIONS = {
    "-p": "partition", "--partition": "partition", "-N": "nodes", "--nodes": "nodes", "-t": "time",
    "--time": "time", "-A": "account", "--account": "account", "-q": "qos", "--qos": "qos",
    "--gpus-per-node": "gpus_per_node", "-c": "cpus_per_task", "--cpus-per-task": "cpus_per_task",
    "--mem": "mem", "-n": "ps, workers, chief", "--ntasks": "ps, workers, chief",
    "--ntasks-per-node": "ps, workers, chief", "-J": "cluster.name", "--job-name": "cluster.name",
    "--parsable": "", "--wrap": "",
}


def custom_error(message: str, suggestion: str | None = None, key: str | None = None) -> PydanticCustomError:
    """A validation error whose one line is `message`, with a did-you-mean and, for a rule over several
    keys, the key path it belongs to (orchestrator.config.explain reads both)."""
    context = {k: v for k, v in (("suggestion", suggestion), ("key", key)) if v is not None}
    return PydanticCustomError("tfcluster", message.replace("{", "{{").replace("}", "}}"), context)


def option_name(word: str) -> str:
    """`--time=1:00` -> `--time`; `-N3` -> `-N`: the sbatch option an argv word gives."""
    if word.startswith("--"):
        return word.split("=", 1)[0]
    return word[:2]


class SlurmSection(Strict):
    nodes: Annotated[int, Field(ge=1, le=100000)]
    workers: Annotated[int, Field(ge=1, le=100000)]
    ps: Annotated[int, Field(ge=0, le=100000)] | None = None  # None: 1 where the mode needs one, else 0
    chief: bool | None = None  # None: the mode's default (its client or coordinator; else worker 0 is chief)
    partition: str | None = None
    time: str | None = None
    account: str | None = None
    qos: str | None = None
    gpus_per_node: Annotated[int, Field(ge=0, le=64)] = 0
    gpus_per_task: Annotated[int, Field(ge=1, le=64)] | None = None  # None: gpus_per_node // most tasks on a node
    cpus_per_task: Annotated[int, Field(ge=1, le=4096)] | None = None
    mem: str | None = None
    sbatch_args: list[str] = Field(default_factory=list)
    login: Annotated[str, Field(min_length=1)] | None = None

    @field_validator("partition")
    @classmethod
    def _partition(cls, value: str | None) -> str | None:
        for name in (value or "").split(","):  # sbatch takes a comma-separated list of partitions
            if value is not None and not _NAME.fullmatch(name):
                raise custom_error(f"`{value}` is not a Slurm partition name (or a comma-separated list of "
                                   "them): letters, digits, `_`, `.`, `+` and `-`")
        return value

    @field_validator("account", "qos")
    @classmethod
    def _name(cls, value: str | None) -> str | None:
        if value is not None and not _NAME.fullmatch(value):
            raise custom_error(f"`{value}` is not a Slurm name: use letters, digits, `_`, `.`, `+` and `-`")
        return value

    @field_validator("time")
    @classmethod
    def _time(cls, value: str | None) -> str | None:
        if value is not None and not _TIME.fullmatch(value):
            raise custom_error(
                f"`{value}` is not a Slurm time limit: write \"minutes\", \"hours:minutes:seconds\" or "
                "\"days-hours:minutes:seconds\"", suggestion=_time_guess(value))
        return value

    @field_validator("mem")
    @classmethod
    def _mem(cls, value: str | None) -> str | None:
        if value is not None and not _MEM.fullmatch(value):
            guess = re.sub(r"\s+|[bB]$|(?<=[KMGTkmgt])[iI]?[bB]$", "", value)
            raise custom_error(f"`{value}` is not a Slurm memory size: megabytes, or a number with K, M, G or T",
                               suggestion=guess if _MEM.fullmatch(guess) else None)
        return value

    @field_validator("sbatch_args")
    @classmethod
    def _sbatch_args(cls, words: list[str]) -> list[str]:
        if words and not words[0].startswith("-"):
            raise custom_error(f"`{words[0]}` is not an sbatch option: sbatch_args starts with one "
                               '(sbatch_args = ["--constraint=a100", "--exclusive"])')
        for word in words:
            if _UNSAFE_WORD.search(word) or not word:
                raise custom_error(f"sbatch argument {word!r} holds whitespace, a quote, a backslash or a control "
                                   "character, which an #SBATCH line cannot carry: give each word separately, "
                                   "without quotes")
            owner = OWNED_OPTIONS.get(option_name(word)) if word.startswith("-") else None
            if owner is not None:
                why = f"is set from `{owner}`" if owner else "is tfcluster's own"
                raise custom_error(f"sbatch option `{option_name(word)}` {why}: remove it from sbatch_args",
                                   suggestion=owner.split(",")[0] or None)
        return words

    @field_validator("login")
    @classmethod
    def _login(cls, value: str | None) -> str | None:
        if value is not None and (value.startswith("-") or _UNSAFE_WORD.search(value)):
            raise custom_error(f"{value!r} is not a host: an address, a DNS name or a Host alias from ~/.ssh/config")
        return value


def _time_guess(value: str) -> str | None:
    """`1h` -> `1:00:00`, `90m` -> `90`: the commonest ways people write a time limit."""
    m = re.fullmatch(r"\s*(\d+)\s*([hm]|min|hours?|minutes?)\s*", value, re.I)
    if m is None:
        return None
    return f"{m.group(1)}:00:00" if m.group(2).lower().startswith("h") else m.group(1)
