"""`tfcluster bench` options: parsed into a BenchSpec, bad values one line with exit code 2."""

from __future__ import annotations

import pytest

from orchestrator.bench.spec import (
    ALL_MODES,
    BenchSpec,
    Kill,
    Straggler,
    TaskRef,
    check_spec,
    parse_kill,
    parse_model_args,
    parse_modes,
    parse_straggler,
    parse_workers,
)
from orchestrator.errors import UsageError


def test_modes_default_to_every_mode_the_project_has() -> None:
    assert parse_modes("all") == ALL_MODES
    assert set(ALL_MODES) == {"between-graph", "in-graph", "multi-worker-mirrored", "parameter-server-strategy"}
    assert parse_modes("in-graph,between-graph,in-graph") == ("in-graph", "between-graph")


def test_straggler_kill_workers_and_model_args_parse() -> None:
    assert parse_straggler("worker:1=4") == Straggler(TaskRef("worker", 1), 4.0)
    assert parse_kill("worker:1@30s") == Kill(TaskRef("worker", 1), 30.0)
    assert parse_kill("chief:0@2m") == Kill(TaskRef("chief", 0), 120.0)
    assert parse_kill("worker:0@7") == Kill(TaskRef("worker", 0), 7.0)
    assert parse_workers("4,1,2,2") == (1, 2, 4)
    assert parse_model_args(["params=2e7", "hidden=256,256", "shards=4"]) == {
        "params": 20_000_000, "hidden": "256,256", "shards": 4}


@pytest.mark.parametrize(("parse", "text", "fragment"), [
    (parse_modes, "between-graph,ingraph", "unknown mode 'ingraph'"),
    (parse_straggler, "worker:1", "TASK=FACTOR"),
    (parse_straggler, "worker:1=0.5", "above 1"),
    (parse_straggler, "ps:0=4", "not a training task"),
    (parse_straggler, "worker:1=fast", "not a number"),
    (parse_kill, "worker:1", "TASK@TIME"),
    (parse_kill, "worker:1@soon", "TASK@TIME"),
    (parse_workers, "one,two", "worker counts"),
    (parse_workers, "0,2", "at least 1"),
])
def test_bad_values_are_one_line_usage_errors(parse: object, text: str, fragment: str) -> None:
    with pytest.raises(UsageError) as info:
        parse(text)  # type: ignore[operator]
    assert fragment in info.value.one_line()
    assert "\n" not in info.value.one_line()
    assert info.value.exit_code == 2


def test_a_kill_after_the_measurement_is_refused() -> None:
    spec = BenchSpec("hosts.toml", seconds=20.0, kill=Kill(TaskRef("worker", 1), 30.0))
    with pytest.raises(UsageError, match=r"after the end of each cell's measurement \(--seconds 20\)"):
        check_spec(spec)
    check_spec(BenchSpec("hosts.toml", seconds=40.0, kill=Kill(TaskRef("worker", 1), 30.0)))
    check_spec(BenchSpec("hosts.toml", steps=1000, kill=Kill(TaskRef("worker", 1), 30.0)))  # steps: no end known
