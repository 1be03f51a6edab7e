"""Issue 20 over real sshd, the loopback machines sharing ONE workdir as an NFS home does: a start
interrupted while it ships leaves nothing, a start's files are private from their first byte, a
user's own `training` package ships and imports as theirs, and a large file ships whole in bounded
memory."""

from __future__ import annotations

import contextlib
import os
import signal
import stat
import threading
import time
from pathlib import Path

import psutil
import pytest

from testkit.sshd import Machines
from tests.helpers.waiting import wait_for
from tests.integration.lifecycle_helpers import cli, cli_process, records, run_processes, unique_run_id

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]


def _random_file(path: Path, mb: int) -> None:
    with open(path, "wb") as f:
        for _ in range(mb):
            f.write(os.urandom(1 << 20))


def _hosts(machines: Machines, tmp_path: Path, sync: list[str], command: str = "sleep 600") -> Path:
    return machines.hosts_toml(tmp_path / "hosts.toml", roles=[["worker"]] * 3, mode="multi-worker-mirrored",
                               training={"command": command, "sync": sync})


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP], ids=["INT", "TERM", "HUP"])
def test_a_start_interrupted_while_it_ships_exits_130_and_leaves_nothing(
        machines: Machines, tmp_path: Path, state_dir: Path, sig: signal.Signals) -> None:
    _random_file(tmp_path / "data.bin", 300)
    hosts = _hosts(machines, tmp_path, ["data.bin"])
    cache = Path(machines.workdir(0)) / "cache"
    run = f"interrupted-{sig.name.lower()}"
    with cli_process(state_dir, "start", str(hosts), "--run", run) as proc:
        wait_for(lambda: cache.is_dir() and any(p.name.startswith(".tmp-") and p.suffix != ".lock"
                                                for p in cache.iterdir()), 60,
                 "a file half shipped", interval=0.02)
        os.kill(proc.pid, sig)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    assert "interrupted" in err and "Traceback" not in err, err
    assert not (Path(machines.workdir(0)) / "runs" / run).exists()  # not even an empty directory
    wait_for(lambda: not [p for p in cache.iterdir() if p.name.startswith(".tmp-")], 10, "no half-shipped file left")
    assert run_processes(run) == []
    assert [r["status"] for r in records(state_dir) if r["run_id"] == run] == ["interrupted"]


def test_every_file_of_a_start_is_private_while_it_starts(machines: Machines, tmp_path: Path, state_dir: Path) -> None:
    """Modes read again and again while a start ships and launches: nothing is ever readable by others."""
    _random_file(tmp_path / "data.bin", 64)
    (tmp_path / "train.py").write_text("print('hi')\n")
    workdir = Path(machines.workdir(0))
    seen: dict[str, int] = {}
    looked_at: set[str] = set()
    done = threading.Event()

    def watch() -> None:  # os.walk: files and directories come and go while it looks (errors ignored)
        while not done.is_set():
            for root, dirs, files in os.walk(workdir):
                for name in (*dirs, *files, ""):
                    path = os.path.join(root, name) if name else root
                    try:
                        st = os.lstat(path)
                    except FileNotFoundError:
                        continue
                    looked_at.add(name)
                    if stat.S_IMODE(st.st_mode) & 0o077 and not stat.S_ISLNK(st.st_mode):
                        seen.setdefault(path, stat.S_IMODE(st.st_mode))
            time.sleep(0.005)  # the watcher's polling: it looks as often as it can

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        res = cli(state_dir, "start", str(_hosts(machines, tmp_path, ["data.bin", "train.py"])), "--run", "private")
        assert res.returncode == 0, res.stderr
    finally:
        done.set()
        watcher.join()
    assert cli(state_dir, "stop", "private", "--purge").returncode == 0
    assert {"run.json", "train.py", "supervisor-m0.json"} <= looked_at  # it did look while the start ran
    assert seen == {}, {p: oct(m) for p, m in seen.items()}


def test_a_users_own_training_package_ships_and_imports_as_theirs(
        machines: Machines, tmp_path: Path, state_dir: Path) -> None:
    project = tmp_path / "project"
    (project / "training").mkdir(parents=True)
    (project / "training" / "__init__.py").write_text("WHOSE = 'mine'\n")
    (project / "train.py").write_text(
        "import training, tfcluster_report\n"
        "print('training is', training.WHOSE, 'report from', tfcluster_report.__file__, flush=True)\n")
    hosts = machines.hosts_toml(project / "hosts.toml", roles=[["worker"]] * 2, mode="multi-worker-mirrored",
                                training={"command": "{python} train.py", "sync": ["."],
                                          # both must print: the chief's exit alone would end the run
                                          "success": "all-workers"})
    run_id = unique_run_id("own-training")
    res = cli(state_dir, "start", str(hosts), "--run", run_id, "--wait")
    assert res.returncode == 0, res.stderr
    logs = cli(state_dir, "logs", run_id).stdout
    assert logs.count("training is mine") == 2, logs
    assert "/lib/tfcluster_report.py" in logs
    assert cli(state_dir, "stop", run_id, "--purge").returncode == 0


LAUNCHER_MARK = "The per-host start program"


def _peak_kb(pid: int) -> int:
    """The process's peak resident memory so far (VmHWM), 0 once it is gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0
    return next((int(line.split()[1]) for line in status.splitlines() if line.startswith("VmHWM:")), 0)


def _start_peaks(state_dir: Path, hosts: Path, run: str) -> tuple[int, int]:
    """(start's, the highest launcher's) peak memory in kB over one `start` of `run`, sampled while they run;
    the launchers are this run's `python -S -c <launcher>` processes (their TFCLUSTER_RUN_DIR names it)."""
    launchers: dict[int, int] = {}
    start_peak = 0
    with cli_process(state_dir, "start", str(hosts), "--run", run) as proc:
        while proc.poll() is None:
            start_peak = max(start_peak, _peak_kb(proc.pid))
            for p in psutil.process_iter(["cmdline"]):
                cmd = p.info["cmdline"] or []
                if len(cmd) >= 3 and cmd[-2] == "-c" and LAUNCHER_MARK in cmd[-1][:300]:
                    with contextlib.suppress(psutil.Error):
                        if f"/runs/{run}/" in p.environ().get("TFCLUSTER_RUN_DIR", "") + "/":
                            launchers[p.pid] = max(launchers.get(p.pid, 0), _peak_kb(p.pid))
            time.sleep(0.02)  # the sampling period of a peak that only grows (VmHWM)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert launchers, "no launcher of the run was seen"
    assert cli(state_dir, "stop", run, "--purge").returncode == 0
    return start_peak, max(launchers.values())


def test_a_large_file_ships_whole_in_bounded_memory(machines: Machines, tmp_path: Path, state_dir: Path) -> None:
    """Issue 20 point 4 with memory measured: a 192 MB file in `sync` adds under 64 MB to `start`'s and to
    every launcher's peak (a cold start, the file shipped, against a warm one, the file cached)."""
    _random_file(tmp_path / "data.bin", 192)
    hosts = _hosts(machines, tmp_path, ["data.bin"], command="cmp data.bin {data} && sleep 600".format(
        data=tmp_path / "data.bin"))
    cold = _start_peaks(state_dir, hosts, "big-cold")
    warm = _start_peaks(state_dir, hosts, "big-warm")
    added_mb = [(c - w) / 1024 for c, w in zip(cold, warm, strict=True)]
    assert all(mb < 64 for mb in added_mb), f"start and launcher peaks cold {cold} kB, warm {warm} kB"
