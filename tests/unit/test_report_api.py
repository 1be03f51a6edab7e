"""`tfcluster_report.report()` without TensorFlow: a real interpreter importing the shim the way a user's
program on a host does (only the run's lib/ on PYTHONPATH: tfcluster_report.py beside the package under its
host name; run from elsewhere, with a `training` package of the program's own), writing real files."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from training.public import tfcluster_report
from training.run.layout import HOST_PACKAGE, RunLayout

ROOT = Path(__file__).resolve().parents[2]


def _host(tmp_path: Path) -> tuple[Path, Path]:
    """(lib, code): a run's lib/ as the launcher builds it, and the program's cwd with its own `training`."""
    lib, code = tmp_path.parent / f"{tmp_path.name}-lib", tmp_path.parent / f"{tmp_path.name}-code"
    if not lib.exists():
        lib.mkdir()
        (lib / HOST_PACKAGE).symlink_to(ROOT / "training")
        (lib / "tfcluster_report.py").symlink_to(ROOT / "training" / "public" / "tfcluster_report.py")
        (code / "training").mkdir(parents=True)
        (code / "training" / "__init__.py").write_text("raise ImportError('the program imported its own training')\n")
    return lib, code


def test_the_report_module_knows_the_package_host_name() -> None:
    assert tfcluster_report.HOST_PACKAGE == HOST_PACKAGE


def run(source: str, tmp_path: Path, env_extra: dict[str, str] | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TFCLUSTER_")}
    lib, code = _host(tmp_path)
    env["PYTHONPATH"] = str(lib)
    env.update(env_extra or {})
    return subprocess.run([sys.executable, "-c", source], check=False, cwd=code, env=env, capture_output=True,
                          text=True, timeout=60)


def task_env(run_dir: Path) -> dict[str, str]:
    return {"TFCLUSTER_RUN_DIR": str(run_dir), "TFCLUSTER_JOB": "worker", "TFCLUSTER_TASK": "2",
            "TFCLUSTER_HOST": "h7", "TFCLUSTER_TASK_ID": "worker-2#0"}


def progress(run_dir: Path) -> list[dict[str, Any]]:
    path = Path(RunLayout(str(run_dir)).events_file("worker", 2))
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_report_from_threads_writes_events_and_flushes_at_exit(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    (run_dir / "events").mkdir(parents=True)
    (run_dir / "run.json").write_text(json.dumps({"plan": {"training": {"progress_interval": 0.2}}}))
    code = """
import os, sys, threading, time
import tfcluster_report
from tfcluster_report import report
assert "tensorflow" not in sys.modules and "training.public.report_tf" not in sys.modules
report(step=0, loss=5.0)
n = 20000
t0 = time.perf_counter()
for i in range(n):
    report(loss=1.0 / (i + 1), examples=2)
per_call = (time.perf_counter() - t0) / n
threads = [threading.Thread(target=lambda: [report(examples=1) for _ in range(1000)]) for _ in range(4)]
for t in threads: t.start()
for t in threads: t.join()
print(f"PER_CALL_US {per_call * 1e6:.2f}")
while not (os.path.exists(EVENTS) and os.path.getsize(EVENTS)):  # the thread's first interval write
    time.sleep(0.01)  # polls
report(step=tfcluster_report.current_step() + 1, loss=0.5, global_step=99999)
""".replace("EVENTS", repr(RunLayout(str(run_dir)).events_file("worker", 2)))
    res = run(code, tmp_path, task_env(run_dir))
    assert res.returncode == 0, res.stderr
    print(res.stdout.strip())  # the per-call cost, for the report (not asserted: timings are benchmarks)
    events = progress(run_dir)
    assert len(events) >= 2
    assert all(e["kind"] == "progress" and e["host"] == "h7" and (e["job"], e["task"]) == ("worker", 2)
               for e in events)
    steps = [e["local_step"] for e in events]
    assert steps == sorted(steps)
    last = events[-1]  # written at exit (atexit), not by the thread's next interval
    assert (last["local_step"], last["global_step"], last["loss"]) == (24001, 99999, 0.5)
    assert last["examples"] == 20000 * 2 + 4 * 1000  # no increment lost between threads
    marker = Path(RunLayout(str(run_dir)).self_progress_file("worker", 2))
    assert marker.read_text().strip() == "worker-2#0"


def test_report_outside_tfcluster_warns_once_and_does_nothing(tmp_path: Path) -> None:
    code = """
import warnings
warnings.simplefilter("always")
from tfcluster_report import report
for i in range(3):
    report(step=i, loss=1.0)
"""
    res = run(code, tmp_path, None)
    assert res.returncode == 0, res.stderr
    assert res.stderr.count("not running under tfcluster") == 1
    assert list(tmp_path.iterdir()) == []


def test_a_bad_value_never_breaks_the_loop(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    code = """
import warnings
warnings.simplefilter("always")
from tfcluster_report import report
report(loss="not a number")
report(loss=object())
report(step=3, loss=0.25)
"""
    res = run(code, tmp_path, task_env(run_dir))
    assert res.returncode == 0, res.stderr
    assert res.stderr.count("ignoring a value") == 1
    assert progress(run_dir)[-1]["local_step"] == 3
