"""Issue 33, items 3 and 9: `start`'s refusals of bad input are one line with the reason, exit 2.

- `--run NAME`: each name that cannot be a run's says why it cannot (not a list of allowed characters
  for a name made only of them: `-x`, `..`), and the CLI prints that one line, with no blank line
  before it (the check comes before the progress display opens).
- The state directory where no run record can be written (a file where `runs/` goes: a refusal root
  meets too, where a read-only mode bit would not stop it): one line naming the directory, exit 2.

The CLI runs for real (python -m tfcluster), on `transport = "local"` hosts: nothing reaches any host
before these checks (tests/integration/test_issue33_exit_codes.py shows it over real sshd).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.errors import UsageError
from orchestrator.run import records
from orchestrator.run.local_ports import free_port_block
from orchestrator.run.run_names import check_run_name, run_name_problem
from tfcluster import exit_codes

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("name", "why"), [
    ("-x", "must not start with '-'"),
    ("--purge", "must not start with '-'"),
    ("..", "'..' is not a run name"),
    (".", "'.' is not a run name"),
    ("", "cannot be empty"),
    (".hidden", "must start with a letter or a digit, not '.'"),
    ("_x", "must start with a letter or a digit, not '_'"),
    ("a/b", "'/' is not allowed in a run name"),
    ("../x", "'/' is not allowed in a run name"),
    ("a b", "' ' is not allowed in a run name"),
    ("été", "'é' is not allowed in a run name"),
    ("a" * 101, "at most 100 characters, not 101"),
])
def test_a_bad_run_name_is_refused_with_its_own_reason(name: str, why: str) -> None:
    problem = run_name_problem(name)
    assert problem is not None and why in problem, problem
    with pytest.raises(UsageError) as refused:
        check_run_name(name)
    assert str(refused.value) == f"--run {name!r}: {problem}"


@pytest.mark.parametrize("name", ["x", "exp-1", "a.b_c-d", "9lives", "a" * 100, "x.."])
def test_a_good_run_name_passes(name: str) -> None:
    assert run_name_problem(name) is None
    check_run_name(name)


def test_a_file_where_the_records_go_is_refused_naming_the_directory(state_dir: Path) -> None:
    state_dir.mkdir(parents=True, exist_ok=True)
    (state_dir / "runs").write_text("a file where the run records' directory goes\n")
    with pytest.raises(records.StateDirError) as refused:
        records.writable_state_dir()
    assert str(refused.value).startswith(f"state directory {state_dir / 'runs'}: cannot write run records there")
    assert "a file is there, not a directory" in str(refused.value)
    assert refused.value.exit_code == 2


def _hosts(tmp_path: Path) -> Path:
    """Two `local` hosts running `sleep`: a file that starts (when nothing else stops it)."""
    hosts = tmp_path / "hosts.toml"
    hosts.write_text(
        f'[cluster]\nname = "i33"\nbase_port = {free_port_block(4)}\n\n'
        f'[remote]\npython = {json.dumps(sys.executable)}\nworkdir = {json.dumps(str(tmp_path / "work"))}\n\n'
        '[[hosts]]\nname = "m0"\naddress = "127.0.0.1"\ntransport = "local"\nroles = ["ps"]\n\n'
        '[[hosts]]\nname = "m1"\naddress = "127.0.0.1"\ntransport = "local"\nroles = ["worker"]\n\n'
        '[training]\ncommand = "sleep 60"\n')
    return hosts


def _tfcluster(*args: str) -> subprocess.CompletedProcess[str]:
    """The real CLI; TFCLUSTER_STATE_DIR (the state_dir fixture's) comes with os.environ."""
    return subprocess.run([sys.executable, "-m", "tfcluster", *args], cwd=REPO, env={**os.environ, "COLUMNS": "200"},
                          capture_output=True, text=True, timeout=120, check=False)


@pytest.mark.parametrize(("name", "why"), [("-x", "must not start with '-'"), ("..", "'..' is not a run name")])
def test_start_refuses_a_bad_run_name_in_one_line(tmp_path: Path, state_dir: Path, name: str, why: str) -> None:
    res = _tfcluster("start", str(_hosts(tmp_path)), f"--run={name}")
    assert res.returncode == 2, res
    assert res.stderr.startswith(f"error: --run {name!r}: ") and res.stderr.count("\n") == 1, repr(res.stderr)
    assert why in res.stderr, res.stderr
    assert res.stdout == "" and not (tmp_path / "work").exists()


def test_start_refuses_a_state_dir_it_cannot_write_in_one_line(tmp_path: Path, state_dir: Path) -> None:
    state_dir.mkdir(parents=True, exist_ok=True)
    (state_dir / "runs").write_text("a file where the run records' directory goes\n")
    res = _tfcluster("start", str(_hosts(tmp_path)), "--run", "never")
    assert res.returncode == 2, res
    assert res.stderr == (f"error: state directory {state_dir / 'runs'}: cannot write run records there (a file is "
                          "there, not a directory); make it writable or set TFCLUSTER_STATE_DIR to a directory that "
                          "is\n"), repr(res.stderr)
    assert res.stdout == "" and not (tmp_path / "work").exists()  # no host was prepared


@pytest.mark.parametrize(("failures", "code"), [
    ([], 0),
    (["refused"], 3),
    (["timeout", "unreachable", "lost"], 3),
    (["refused", "prepare"], 1),  # a host that was reached and failed: that failure is known
    ([None], 1),  # `stop`: reached, and something of the run is left there
    (["refused", None], 1),
    (["auth-failed"], 1),  # reached: the user must act there
])
def test_start_and_stop_say_3_only_when_every_failed_host_was_unreachable(failures: list[str | None],
                                                                          code: int) -> None:
    assert exit_codes.for_hosts(failures) == code
