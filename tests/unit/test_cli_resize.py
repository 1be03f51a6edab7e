"""`tfcluster resize` through the real entry point: every refusal is one line on stderr, exit 2, before any
host is reached, and leaves the run record's bytes as they were; `--dry-run` prints the change only.
The run is a record (no host runs anything: every path here stops before reaching one)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from orchestrator.plan.from_file import plan_file
from orchestrator.run import records
from tests.helpers.terminal import Terminal

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


def _restart_run(tmp_path: Path, mode: str, roles: list[list[str]], run_id: str,
                 at: tuple[int, int] | None = None, extra: str = "") -> tuple[Path, Path]:
    """A recorded built-in run of `mode` (`extra`: more of its `[training]`) and its grown file; `at`:
    (checkpoint step, run step) written where the chief's host keeps them (the `checkpoint` file, its last
    progress event), as the trainers write them."""
    training = 'model = "mlp"\ncheckpoint_every_steps = 200\ncheckpoint_every_secs = 30.0\n' + extra
    path = recorded(hosts_toml(tmp_path / f"{run_id}.toml", roles, training=training, mode=mode), run_id)
    if at is not None:
        plan = plan_file(tmp_path / f"{run_id}.toml")
        chief = plan.chief
        run_dir = Path(plan.host(chief.host).workdir, "runs", run_id, chief.host)
        (run_dir / "checkpoints").mkdir(parents=True)
        (run_dir / "checkpoints" / "checkpoint").write_text(
            f'model_checkpoint_path: "ckpt-{at[0]}"\nall_model_checkpoint_paths: "ckpt-{at[0]}"\n')
        (run_dir / "events").mkdir()
        (run_dir / "events" / f"{chief.job}-{chief.index}.jsonl").write_text(
            json.dumps({"global_step": at[1] - 7}) + "\n" + json.dumps({"global_step": at[1]}) + "\n")
    grown = hosts_toml(tmp_path / f"{run_id}-grown.toml", [*roles, ["worker"]], training=training, mode=mode)
    return path, grown


def test_an_in_graph_resize_says_the_client_restarts_and_the_steps_it_may_lose(tmp_path: Path,
                                                                                state_dir: Path) -> None:
    path, grown = _restart_run(tmp_path, "in-graph", [["ps"], ["chief"], ["worker"]], "r-ig", at=(400, 437))
    before = path.read_bytes()
    res = tfcluster("resize", "r-ig", str(grown), "--dry-run")
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines() == [
        "host m3 joins", "worker:1 starts on m3",
        "chief:0 (the in-graph client) restarts with the new cluster (2 workers): it resumes from the variables "
        "the ps tasks hold, or from the last checkpoint if a ps lost them",
        "steps lost: at most those since the last checkpoint (the last checkpoint was at step 400, the run is at "
        "step 437: 37 steps since)",
        "dry run: nothing changed"]
    res = tfcluster("resize", "r-ig", str(grown))  # stdin is not a terminal: nobody to ask
    assert res.returncode == 2 and "37 steps since" in res.stdout, res.stdout
    assert res.stderr.strip().splitlines() == [
        "error: this resize restarts chief:0 (the steps since the last checkpoint may be lost): pass --yes to go ahead"]
    refused(tfcluster("resize", "r-ig", str(grown), "--restart-all", "--yes"), "--restart-all")
    assert path.read_bytes() == before


def test_a_mirrored_resize_says_the_group_restarts_from_its_checkpoint(tmp_path: Path, state_dir: Path) -> None:
    path, grown = _restart_run(tmp_path, "multi-worker-mirrored", [["worker"], ["worker"]], "r-mwm")
    res = tfcluster("resize", "r-mwm", str(grown), "--dry-run")  # nothing to read on the chief's host
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines()[2:] == [
        "worker:0, worker:1 restart as one group with the new cluster (3 workers) and resume from the last "
        "checkpoint",
        "steps lost: at most those since the last checkpoint (a checkpoint every 200 steps or 30 s, whichever "
        "comes first)",
        "dry run: nothing changed"]
    before = path.read_bytes()
    res = tfcluster("resize", "r-mwm", str(grown))
    assert res.returncode == 2 and "restarts worker:0, worker:1 (the steps since" in res.stderr, res.stderr
    assert path.read_bytes() == before


@pytest.mark.parametrize(("mode", "training", "roles", "head"), [
    ("between-graph", "sync_replicas = true", [["ps"], ["worker"]],
     "ps:0, worker:0 restart with the new cluster (2 workers): the ps with fresh synchronous accumulators "
     "(2 of 2 replicas' gradients per update), every trainer from the chief's last checkpoint"),
    ("parameter-server-strategy", "", [["ps", "chief"], ["worker"]],
     "chief:0, ps:0, worker:0 restart with the new cluster (2 workers): the coordinator's cluster is fixed when "
     "it starts, its ps and workers start with it, and it resumes from its last checkpoint"),
])
def test_a_sync_or_ps_strategy_resize_says_every_kept_task_restarts_from_the_checkpoint(
        tmp_path: Path, state_dir: Path, mode: str, training: str, roles: list[list[str]], head: str) -> None:
    """No longer refused: the command says what restarts, the ps too, and the steps it may lose, then asks."""
    run_id = "r-" + mode[:4]
    path, grown = _restart_run(tmp_path, mode, roles, run_id, at=(300, 321), extra=training)
    before = path.read_bytes()
    res = tfcluster("resize", run_id, str(grown), "--dry-run")
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines()[2:] == [
        head, "steps lost: at most those since the last checkpoint (the last checkpoint was at step 300, the run "
        "is at step 321: 21 steps since)", "dry run: nothing changed"]
    res = tfcluster("resize", run_id, str(grown))  # stdin is not a terminal: nobody to ask
    assert res.returncode == 2 and "(the steps since the last checkpoint may be lost): pass --yes" in res.stderr
    refused(tfcluster("resize", run_id, str(grown), "--restart-all", "--yes"), "--restart-all")
    assert path.read_bytes() == before


def test_on_a_terminal_the_restart_is_asked_and_no_changes_nothing(tmp_path: Path, state_dir: Path) -> None:
    path, grown = _restart_run(tmp_path, "multi-worker-mirrored", [["worker"], ["worker"]], "r-ask", at=(200, 210))
    before = path.read_bytes()
    env = {**os.environ, "PYTHONPATH": str(REPO), "HOME": os.environ.get("HOME", "/tmp")}
    with Terminal([sys.executable, "-m", "tfcluster", "resize", "r-ask", str(grown)], env, REPO, columns=250) as term:
        shown = term.wait_until_shown(lambda t: "may be lost)? [y/N]" in t, 60, "the question")
        assert "the last checkpoint was at step 200, the run is at step 210: 10 steps since" in shown
        assert "restart worker:0, worker:1 (the steps since the last checkpoint may be lost)?" in shown
        term.write(b"n\r")
        assert term.wait_exit(30) == 130  # declined: as interrupted (tfcluster/exit_codes.py), nothing done
    assert path.read_bytes() == before
