"""Every tfcluster command is a fresh process, and scripts call them in loops (fan-out at scale and the
read path are measured on the whole CLI: benchmarks/results/fanout.md, latency.md): a command must not
import the heavy libraries only other commands use. matplotlib alone cost 0.43 s of CPU per command
when `bench` imported it at registration; issue 24 found Paramiko (with `invoke`), the plan's schema
(pydantic) and Typer's Rich help in every command's start-up.

Each command runs in its own interpreter, as a user runs it; the test lists the modules it imported.
(Typer itself imports pydantic to coerce the values of options: what `ls` must not import is the plan's
schema, orchestrator.config.schema.)
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.run import records as runs
from tests.plans import tiny_plan

REPO = Path(__file__).resolve().parents[2]
NEVER = ("matplotlib", "numpy", "tensorflow", "textual")  # no command but `bench`, `dash` and `demo` needs them
SSH = ("paramiko", "invoke.context")  # (a stand-in named `invoke` is no import: orchestrator/deferred_invoke.py)
SCHEMA = ("orchestrator.config.schema", "orchestrator.plan.model")

LIST_MODULES = """\
import atexit, json, sys
out = sys.argv.pop()
atexit.register(lambda: open(out, "w").write(json.dumps(sorted(sys.modules))))
sys.argv = ["tfcluster", *sys.argv[1:]]
from tfcluster.cli import main
main()
"""


def imported_by(tmp_path: Path, *args: str) -> set[str]:
    """The modules `tfcluster ARGS` imported (it runs with an empty HOME: no ~/.ssh/config)."""
    out = tmp_path / "modules.json"
    env = {**os.environ, "HOME": str(tmp_path), "TFCLUSTER_STATE_DIR": str(tmp_path / "state"),
           "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", LIST_MODULES, *args, str(out)], capture_output=True, text=True,
                          env=env, cwd=REPO, timeout=60, check=False)
    assert out.exists(), done.stderr
    return set(json.loads(out.read_text()))


def heavy(modules: set[str], names: tuple[str, ...]) -> list[str]:
    """Which of `names` (packages or modules) were imported."""
    return [n for n in names if n in modules]


def test_help_imports_only_typer_and_the_command_signatures(tmp_path: Path) -> None:
    modules = imported_by(tmp_path, "--help")
    assert heavy(modules, (*NEVER, *SSH, *SCHEMA, "pydantic", "rich", "orchestrator.run", "orchestrator.monitor")) == []


def test_ls_reads_the_records_without_their_plans(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TFCLUSTER_STATE_DIR", str(tmp_path / "state"))
    record = runs.RunRecord(run_id="r1", config_path="hosts.toml", cluster="demo", mode="between-graph",
                            created=1.0, plan=tiny_plan(), hosts=[runs.HostRecord("m0", "/w", "/w/runs/r1")])
    runs.save(record)
    modules = imported_by(tmp_path, "ls")
    assert heavy(modules, (*NEVER, *SSH, *SCHEMA, "orchestrator.monitor", "orchestrator.transport")) == []


def test_plan_parses_the_config_without_ssh_or_the_monitor(tmp_path: Path) -> None:
    modules = imported_by(tmp_path, "plan", str(REPO / "hosts.example.toml"))
    assert "orchestrator.config.schema" in modules  # (it did plan)
    assert heavy(modules, (*NEVER, *SSH, "orchestrator.monitor", "orchestrator.run.launch")) == []


def test_status_and_dash_once_of_a_local_run_need_neither_ssh_nor_the_agents(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TFCLUSTER_STATE_DIR", str(tmp_path / "state"))
    record = runs.RunRecord(run_id="r1", config_path="hosts.toml", cluster="demo", mode="between-graph",
                            created=1.0, plan=tiny_plan(), hosts=[runs.HostRecord(f"m{i}", str(tmp_path), str(
                                tmp_path / "runs" / "r1")) for i in range(3)], status="started")
    runs.save(record)
    for command in (["status", "r1"], ["dash", "r1", "--once", "--json"]):
        modules = imported_by(tmp_path, *command)
        assert "orchestrator.monitor.status" in modules, command  # (it did read the run)
        assert heavy(modules, (*NEVER, *SSH, "orchestrator.monitor.collect")) == [], command


def test_paramiko_is_imported_without_invoke_which_still_works_when_used() -> None:
    """`Match exec` in an ssh config is what paramiko.config uses invoke for (orchestrator/deferred_invoke.py)."""
    code = ("import sys; import orchestrator.transport.ssh; import paramiko.config as c\n"
            "before = 'invoke.context' in sys.modules\n"
            "print(before, callable(c.invoke.run), 'invoke.context' in sys.modules)")
    if importlib.util.find_spec("invoke") is None:
        # Paramiko without invoke (an optional dependency at older Paramiko versions: the floors' venv)
        # leaves paramiko.config.invoke None and refuses `Match exec` itself; no stand-in is put there.
        code = "import orchestrator.transport.ssh; import paramiko.config as c; print(c.invoke is None)"
        expected = ["True"]
    else:
        expected = ["False", "True", "True"]
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60,
                         cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert out.stdout.split() == expected, out.stderr
