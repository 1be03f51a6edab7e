"""`tfcluster resize` through the real entry point: every refusal is one line on stderr, exit 2, before any
host is reached, and leaves the run record's bytes as they were; `--dry-run` prints the change only.
The run is a record (no host runs anything: every path here stops before reaching one)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from orchestrator.plan.from_file import plan_file
from orchestrator.run import records

REPO = Path(__file__).resolve().parents[2]
COMMAND = 'command = "{python} prog.py {job} {task}"'


def hosts_toml(path: Path, roles: list[list[str]], training: str = COMMAND, extra: str = "",
               mode: str = "between-graph") -> Path:
    out = ["[cluster]", 'name = "demo"', f'mode = "{mode}"', "base_port = 23000", "", "[training]", training, extra,
           ""]
    for i, r in enumerate(roles):
        out += ["[[hosts]]", f'name = "m{i}"', f'address = "127.0.0.{i + 2}"', 'transport = "local"',
                f'workdir = "{path.parent}/m{i}"', f"roles = {r!r}".replace("'", '"'), ""]
    path.write_text("\n".join(out))
    return path


def tfcluster(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "200", "HOME": os.environ.get("HOME", "/tmp")}
    return subprocess.run([sys.executable, "-m", "tfcluster", *args], check=False, cwd=REPO, capture_output=True,
                          text=True, timeout=60, env=env, stdin=subprocess.DEVNULL)


def recorded(hosts: Path, run_id: str = "r1", **fields: object) -> Path:
    plan = plan_file(hosts)
    record = records.RunRecord(
        run_id=run_id, config_path=str(hosts), cluster=plan.cluster_name, mode=plan.mode, created=time.time(),
        plan=plan, hosts=[records.HostRecord(name=h.name, workdir=h.workdir, run_dir=f"{h.workdir}/runs/{run_id}/{h.name}",
                                             started=True, supervisor_pid=1) for h in plan.hosts],
        status="started")
    for key, value in fields.items():
        setattr(record, key, value)
    assert records.STATE_DIR_ENV in os.environ  # never the user's own state dir
    records.save(record)
    return records.state_dir() / f"{run_id}.json"


def refused(res: subprocess.CompletedProcess[str], *words: str) -> None:
    assert res.returncode == 2, res.stdout + res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in res.stderr, res.stderr
    for word in words:
        assert word in lines[0], lines[0]
    assert res.stdout == ""


@pytest.fixture
def recorded_run(tmp_path: Path, state_dir: Path) -> tuple[Path, bytes]:
    """The run r1 recorded in the test's own state dir (`state_dir`, tests/conftest.py: set first)."""
    path = recorded(hosts_toml(tmp_path / "hosts.toml", [["ps"], ["worker"]]))
    return path, path.read_bytes()


@pytest.mark.parametrize(("roles", "extra", "words"), [
    ([["worker"], ["ps"]], "", ("ps ps:0 would move from m0 to m1", "only workers may change")),
    ([["ps"], ["worker"], ["ps"]], "", ("ps ps:1 on m2 would be added",)),
    ([["ps"], ["worker"]], "steps = 5", ("training.steps",)),
])
def test_a_change_beyond_the_workers_is_refused(recorded_run: tuple[Path, bytes], tmp_path: Path, roles: list[list[str]],
                                                extra: str, words: tuple[str, ...]) -> None:
    path, before = recorded_run
    refused(tfcluster("resize", "r1", str(hosts_toml(tmp_path / "new.toml", roles, extra=extra))), *words)
    assert path.read_bytes() == before


def test_a_bad_hosts_file_is_refused_naming_it(recorded_run: tuple[Path, bytes], tmp_path: Path) -> None:
    path, before = recorded_run
    bad = hosts_toml(tmp_path / "bad.toml", [["ps"], ["worker"]], extra="no_such_key = 1")
    refused(tfcluster("resize", "r1", str(bad)), "bad.toml", "no_such_key")
    refused(tfcluster("resize", "nope", str(bad)), "unknown run 'nope'")
    assert path.read_bytes() == before


def test_a_slurm_run_and_a_stopped_run_are_refused(tmp_path: Path, state_dir: Path) -> None:
    grown = hosts_toml(tmp_path / "grown.toml", [["ps"], ["worker"], ["worker"]])
    hosts = hosts_toml(tmp_path / "hosts.toml", [["ps"], ["worker"]])
    slurm = recorded(hosts, "r-slurm", slurm=records.SlurmJob(job_id="42"))
    stopped = recorded(hosts, "r-stopped", status="stopped")
    before = {p: p.read_bytes() for p in (slurm, stopped)}
    refused(tfcluster("resize", "r-slurm", str(grown)), "Slurm job", "new job")
    refused(tfcluster("resize", "r-stopped", str(grown)), "is stopped", "only a run started on every host")
    assert {p: p.read_bytes() for p in before} == before


@pytest.mark.parametrize(("mode", "training", "shown"), [
    ("between-graph", 'model = "mlp"\nsync_replicas = true', "synchronous between-graph"),
    ("in-graph", 'model = "mlp"', "in-graph"),
    ("multi-worker-mirrored", 'model = "mlp"', "multi-worker-mirrored"),
    ("parameter-server-strategy", 'model = "mlp"', "parameter-server-strategy"),
])
def test_a_built_in_model_is_refused_but_in_async_between_graph(tmp_path: Path, state_dir: Path, mode: str,
                                                                 training: str, shown: str) -> None:
    roles = [["worker"], ["worker"]] if mode == "multi-worker-mirrored" else [["ps"], ["worker"]]
    path = recorded(hosts_toml(tmp_path / "run.toml", roles, training=training, mode=mode), "r-builtin")
    before = path.read_bytes()
    grown = hosts_toml(tmp_path / "grown.toml", [*roles, ["worker"]], training=training, mode=mode)
    refused(tfcluster("resize", "r-builtin", str(grown)), f"resize of a {shown} run of a built-in model is not built yet")
    assert path.read_bytes() == before


def test_an_async_between_graph_run_of_a_built_in_model_can_be_resized(tmp_path: Path, state_dir: Path) -> None:
    path = recorded(hosts_toml(tmp_path / "mlp.toml", [["ps"], ["worker"]], training='model = "mlp"'), "r-mlp")
    before = path.read_bytes()
    grown = hosts_toml(tmp_path / "mlp-grown.toml", [["ps"], ["worker"], ["worker"]], training='model = "mlp"')
    refused(tfcluster("resize", "r-mlp", str(grown), "--restart-all", "--yes"), "--restart-all", "nothing changed")
    res = tfcluster("resize", "r-mlp", str(grown), "--dry-run")
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines() == ["host m2 joins", "worker:1 starts on m2", "dry run: nothing changed"]
    assert path.read_bytes() == before


def test_dry_run_prints_the_change_and_touches_nothing(recorded_run: tuple[Path, bytes], tmp_path: Path) -> None:
    path, before = recorded_run
    res = tfcluster("resize", "r1", str(hosts_toml(tmp_path / "new.toml", [["ps"], ["worker"], ["worker"]])),
                    "--dry-run")
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines() == ["host m2 joins", "worker:1 starts on m2", "dry run: nothing changed"]
    assert path.read_bytes() == before


def test_nothing_to_change_and_a_restart_not_confirmed(recorded_run: tuple[Path, bytes], tmp_path: Path) -> None:
    path, before = recorded_run
    res = tfcluster("resize", "r1", str(hosts_toml(tmp_path / "same.toml", [["ps"], ["worker"]])))
    assert res.returncode == 0 and "nothing to change" in res.stdout, res.stderr
    grown = hosts_toml(tmp_path / "new.toml", [["ps"], ["worker"], ["worker"]])
    res = tfcluster("resize", "r1", str(grown), "--restart-all")  # stdin is not a terminal: nobody to ask
    assert res.returncode == 2 and "restarts ps:0, worker:0: pass --yes" in res.stderr, res.stderr
    assert path.read_bytes() == before
