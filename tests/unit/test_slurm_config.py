"""Bad [slurm] sections give one line: file:line, key path, what is wrong, a suggestion (as [[hosts]] do);
the rules that need the mode (ps, chief, nodes, GPUs) and the commands that cannot run a Slurm job yet."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from orchestrator.errors import ConfigError
from orchestrator.plan.from_file import plan_file, slurm_plan_file

BASE = """\
[cluster]
name = "t"

[slurm]
nodes = 2
workers = 3
"""
GOOD = BASE + 'partition = "gpu"\ntime = "1:00:00"\n'


@pytest.fixture(autouse=True)
def isolated_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))  # never the developer's ~/.ssh/config


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "hosts.toml"
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def slurm_error(tmp_path: Path, text: str) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        slurm_plan_file(write(tmp_path, text))
    line = info.value.one_line()
    assert "\n" not in line and "Input should be" not in line and "errors.pydantic.dev" not in line
    return info.value


def test_a_good_section_plans(tmp_path: Path) -> None:
    plan = slurm_plan_file(write(tmp_path, GOOD))
    assert [t.name for t in plan.ranks] == ["ps:0", "worker:0", "worker:1", "worker:2"]
    assert plan.tasks_per_node == (2, 2)


def test_hosts_and_slurm_together_is_one_line_at_the_slurm_section(tmp_path: Path) -> None:
    text = GOOD + '\n[[hosts]]\nname = "a"\naddress = "10.0.0.1"\nroles = ["ps", "worker"]\n'
    err = slurm_error(tmp_path, text)
    assert err.one_line() == (
        f"{tmp_path}/hosts.toml:4: slurm: a file describes its machines with [[hosts]] or a Slurm job with "
        "[slurm], never both: remove one of them"
    )


def test_unknown_key_suggests_the_nearest(tmp_path: Path) -> None:
    err = slurm_error(tmp_path, GOOD + "gpu_per_node = 4\n")
    assert err.one_line() == (
        f"{tmp_path}/hosts.toml:9: slurm.gpu_per_node: unknown key `gpu_per_node` (did you mean `gpus_per_node`?)"
    )


def test_required_nodes(tmp_path: Path) -> None:
    err = slurm_error(tmp_path, GOOD.replace("nodes = 2\n", ""))
    assert err.one_line() == f"{tmp_path}/hosts.toml:4: slurm.nodes: required key `nodes` is missing"


@pytest.mark.parametrize(("line", "expected", "suggestion"), [
    ('time = "1h"', '`1h` is not a Slurm time limit: write "minutes", "hours:minutes:seconds" or '
                    '"days-hours:minutes:seconds"', "1:00:00"),
    ('time = "90 min"', "is not a Slurm time limit", "90"),
    ("time = 60", 'expected a string, got an integer `60`', '"60"'),
    ('mem = "16GB"', "`16GB` is not a Slurm memory size: megabytes, or a number with K, M, G or T", "16G"),
    ("mem = 4000", "expected a string, got an integer `4000`", '"4000"'),
    ('partition = "gpu; rm -rf ~"', "`gpu; rm -rf ~` is not a Slurm partition name", None),
    ('account = "a b"', "`a b` is not a Slurm name", None),
    ('sbatch_args = ["--time=2:00:00"]', "sbatch option `--time` is set from `time`: remove it from sbatch_args",
     "time"),
    ('sbatch_args = ["-N2"]', "sbatch option `-N` is set from `nodes`", "nodes"),
    ('sbatch_args = ["--ntasks=9"]', "sbatch option `--ntasks` is set from `ps, workers, chief`", "ps"),
    ('sbatch_args = ["--comment=two words"]', "holds whitespace, a quote, a backslash or a control character",
     None),
    ('sbatch_args = ["--comment=x\\ny"]', "holds whitespace", None),
    ('sbatch_args = ["exclusive"]', "`exclusive` is not an sbatch option", None),
    ('login = "-oProxyCommand=x"', "is not a host", None),
    ("gpus_per_node = 65", "`gpus_per_node` 65 is out of range (0-64)", None),
    ("chief = 1", "expected a boolean (true or false), got an integer `1`", None),
])
def test_each_bad_value_is_one_line_naming_the_key(tmp_path: Path, line: str, expected: str,
                                                   suggestion: str | None) -> None:
    err = slurm_error(tmp_path, BASE + line + "\n")
    key = line.split(" =", maxsplit=1)[0]
    assert err.line == 7, err.one_line()
    assert err.key == f"slurm.{key}"
    assert expected in err.message, err.message
    assert err.suggestion == suggestion


@pytest.mark.parametrize("value", ["30", "30:00", "1:00:00", "2-12", "2-12:30", "2-12:30:00", "UNLIMITED", "0"])
def test_every_time_format_of_sbatch_is_accepted(tmp_path: Path, value: str) -> None:
    assert slurm_plan_file(write(tmp_path, GOOD.replace('"1:00:00"', f'"{value}"'))).slurm.time == value


def test_sbatch_args_take_options_with_separate_values(tmp_path: Path) -> None:
    plan = slurm_plan_file(write(tmp_path, GOOD + 'sbatch_args = ["--constraint", "a100", "--exclusive"]\n'))
    assert plan.slurm.sbatch_args == ["--constraint", "a100", "--exclusive"]


@pytest.mark.parametrize(("mode", "extra", "key", "fragment"), [
    ("multi-worker-mirrored", "ps = 1", "slurm.ps", "multi-worker-mirrored mode has no parameter server"),
    ("between-graph", "ps = 0", "slurm.ps", "between-graph mode needs a parameter server: set ps = 1 or more"),
    ("parameter-server-strategy", "chief = false", "slurm.chief",
     "parameter-server-strategy mode always has its chief task (its coordinator): remove chief = false"),
    ("in-graph", "chief = false", "slurm.chief", "in-graph mode always has its chief task (its client)"),
    ("between-graph", "nodes = 5", "slurm.nodes", "nodes = 5 but the job has 4 tasks"),
    ("between-graph", "gpus_per_node = 1", "slurm.gpus_per_node",
     "gpus_per_node = 1 cannot give each of the 2 tasks of a node a GPU"),
    ("between-graph", "gpus_per_task = 2", "slurm.gpus_per_task", "gpus_per_task = 2 but the job asks for no GPU"),
    ("between-graph", "gpus_per_node = 4\ngpus_per_task = 3", "slurm.gpus_per_task",
     "gpus_per_task = 3 does not divide gpus_per_node = 4: use one of 1, 2, 4"),
    ("between-graph", "gpus_per_node = 4\ngpus_per_task = 4", "slurm.gpus_per_task",
     "gpus_per_task = 4 with 2 tasks on the busiest node needs 8 GPUs there, gpus_per_node = 4: use "
     "gpus_per_task = 2"),
    ("parameter-server-strategy", "gpus_per_node = 8\ngpus_per_task = 2", "slurm.gpus_per_task",
     "the built-in parameter-server-strategy trainer runs one replica per worker task"),
])
def test_rules_that_need_the_mode_name_their_key_and_line(tmp_path: Path, mode: str, extra: str, key: str,
                                                          fragment: str) -> None:
    text = GOOD.replace('name = "t"', f'name = "t"\nmode = "{mode}"').replace("nodes = 2\n", "")
    if not extra.startswith("nodes"):
        text += "nodes = 2\n"
    err = slurm_error(tmp_path, text + extra + "\n")
    assert err.key == key and err.line is not None
    assert fragment in err.message, err.message


def test_gpus_per_task_splits_each_nodes_gpus_as_the_hosts_key_does(tmp_path: Path) -> None:
    """2 tasks a node: gpus_per_node = 8 gives each 4 (the resolver's split), gpus_per_task = 2 each 2, in
    order, the rest idle (said); ps tasks none."""
    resolver = slurm_plan_file(write(tmp_path, GOOD + "gpus_per_node = 8\n"))
    assert [t.cuda_visible_devices for t in resolver.ranks] == ["", "4,5,6,7", "0,1,2,3", "4,5,6,7"]
    plan = slurm_plan_file(write(tmp_path, GOOD + "gpus_per_node = 8\ngpus_per_task = 2\n"))
    assert plan.gpus_per_task == 2
    assert [(t.name, t.gpus, t.cuda_visible_devices) for t in plan.ranks] == [
        ("ps:0", (), ""), ("worker:0", (2, 3), "2,3"), ("worker:1", (0, 1), "0,1"), ("worker:2", (2, 3), "2,3")]
    assert plan.ranks[1].device == "/job:worker/task:0/device:GPU:0"
    assert any("4 GPU(s) of the busiest nodes stay idle" in w for w in plan.plan.warnings)
    assert any("computes on its GPU:0 only" in w for w in plan.plan.warnings)  # the built-in between-graph


def test_check_refuses_a_slurm_job_with_one_line(tmp_path: Path) -> None:
    """Its entry, plan_file, refuses it (`start` and `bench` submit it: orchestrator.run.slurm_start)."""
    with pytest.raises(ConfigError) as info:
        plan_file(write(tmp_path, GOOD))
    assert info.value.one_line().startswith(f"{tmp_path}/hosts.toml:4: slurm: `check` does not probe a [slurm] "
                                            "job's nodes")


def test_export_of_a_hosts_file_says_it_needs_slurm(tmp_path: Path) -> None:
    err = slurm_error(tmp_path, '[[hosts]]\nname = "a"\naddress = "10.0.0.1"\nroles = ["ps", "worker"]\n')
    assert err.key == "slurm" and "no [slurm] section" in err.message
