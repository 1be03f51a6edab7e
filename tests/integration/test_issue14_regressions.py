"""Issue 14's five problems, each reproduced at the command line: `python -m tfcluster ...` subprocesses,
hosts.toml files, real sshd on loopback machines, real TensorFlow, real files and a real shell.

The same file runs against any checkout of the project: the CLI under test is the one in
$TFCLUSTER_CHECKOUT (default: this repo), run with that checkout as its cwd and PYTHONPATH. On the code
from before the fixes every test fails, each for its problem; on the fixed code every test passes
(benchmarks/results/issue14_regressions.md). So only what both versions offer is used: `start --run
--timeout`, `status --json`, `dash --once --json`, `ls`, `plan`, `logs`, `stop --grace`, the run records'
JSON (each host's run dir) and the trainers' own progress events (events/<job>-<task>.jsonl there).

1. a second `start` on the same hosts and ports leaves the first run alone
2. a restarted chief never rolls the global step back
3. placeholders inside quotes reach the command as their literal value, and nothing else runs
4. stray run records and Rich markup in an address never make a traceback
5. a task whose supervisor and process are gone is `lost` for `dash` as for `status`, and the exit
   codes of both say so (as they do for an unreachable host)

Tests 2 and 5 share one TensorFlow run (a module fixture: one cluster start less) and come last, after
the cheap tests 3 and 4, so that this run does not pace the others. About 75 s on a loaded 2-core machine.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pytest

from testkit.sshd import Machines
from tests import requires
from tests.faults import measure
from tests.helpers.waiting import wait_for
from tests.integration.lifecycle_helpers import REPO, kill_run, run_processes, unique_run_id

pytestmark = pytest.mark.integration
requires.tensorflow()

CHECKOUT = Path(os.environ.get("TFCLUSTER_CHECKOUT") or REPO).resolve()
SHARED_WORKDIR = False  # the checkouts it compares predate shared workdirs: each machine its own (conftest.machines)
TINY = {"model": "mlp", "batch_size": 16, "progress_interval": 0.5, "checkpoint_every_secs": 600.0}
ALIVE = {"starting", "running", "stalled", "restarting"}
CHECKPOINT_EVERY = 100  # steps, in the shared run of tests 2 and 5


# --- the CLI under test and what it leaves on disk ---------------------------------------------------
def tfcluster(state: Path, *args: str, timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TFCLUSTER_STATE_DIR": str(state), "PYTHONPATH": str(CHECKOUT), "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-m", "tfcluster", *args], check=False, env=env, cwd=CHECKOUT,
                          capture_output=True, text=True, timeout=timeout)


def start(state: Path, hosts: Path, run: str) -> subprocess.CompletedProcess[str]:
    return tfcluster(state, "start", str(hosts), "--run", run, "--timeout", "150", timeout=200)


def status(state: Path, run: str) -> tuple[int, dict[str, Any]]:
    res = tfcluster(state, "status", run, "--json", timeout=90)
    assert res.stdout.strip(), res.stdout + res.stderr
    return res.returncode, json.loads(res.stdout)


def task(st: dict[str, Any], name: str) -> dict[str, Any]:
    return next(t for t in st["tasks"] if t["name"] == name)


def host(st: dict[str, Any], name: str) -> dict[str, Any]:
    return next(h for h in st["hosts"] if h["host"] == name)


def ended(state: Path, run: str) -> dict[str, Any] | None:
    st = status(state, run)[1]
    return st if st["state"] in ("finished", "failed", "stopped") and all(t["final"] for t in st["tasks"]) else None


def log_lines(state: Path, run: str, who: str, pattern: str = "") -> list[str]:
    out = tfcluster(state, "logs", run, who, "-n", "40").stdout.splitlines()
    return [line[:200] for line in out if re.search(pattern, line)][-6:]


def run_dirs(state: Path, run: str) -> list[str]:
    data = json.loads((state / "runs" / f"{run}.json").read_text())
    return [h["run_dir"] for h in data["hosts"] if h["run_dir"]]


def points(state: Path, run: str) -> list[measure.Point]:
    return measure.progress_points(run_dirs(state, run))


def global_step(state: Path, run: str) -> int:
    return max((p.global_step for p in points(state, run)), default=0)


def alive(pid: int) -> bool:
    try:
        return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return False


def clean_up(state: Path) -> None:
    """Every run recorded in `state` stopped by the CLI under test while it has processes, then any
    process of it still alive killed (records the test made unreadable on purpose are skipped)."""
    for path in sorted((state / "runs").glob("*.json")):
        try:
            run = json.loads(path.read_text()).get("run_id")
        except (ValueError, AttributeError):
            continue
        if isinstance(run, str):
            if run_processes(run):
                tfcluster(state, "stop", run, "--grace", "1")
            kill_run(run)




@pytest.fixture
def state(tmp_path: Path) -> Iterator[Path]:
    """Not conftest's state_dir: its runs are cleaned up by the CLI under test ($TFCLUSTER_CHECKOUT), whose
    records this checkout's `stop` may not read."""
    try:
        yield tmp_path / "state"
    finally:
        clean_up(tmp_path / "state")


# --- 1. runs never cross -----------------------------------------------------------------------------
def test_second_start_on_the_same_hosts_leaves_the_first_run_alone(
    machines: Machines, tmp_path: Path, state: Path
) -> None:
    """A second `start` of the same hosts.toml (same hosts, same ports) while the first run trains: the
    first run's ps:0 stays the same process and the first run finishes, its worker exiting 0 (before the
    fix the second run's stand-in told the first run's PS that worker:0 would not finish: that PS exited
    and the first run's worker was left without it). The first run's worker is paused (SIGSTOP) while
    the second start plays out, so the first run is mid-run then however fast this machine trains."""
    steps = 300
    hosts = machines.hosts_toml(tmp_path / "hosts.toml", roles=[["ps"], ["worker"]],
                                training={**TINY, "steps": steps, "max_restarts": 0, "slowdown": {"worker:0": 2.0}})
    first, second = unique_run_id("i14-first"), unique_run_id("i14-second")
    res = start(state, hosts, first)
    assert res.returncode == 0, res.stdout + res.stderr
    st = status(state, first)[1]
    ps_pid, worker_pid = task(st, "ps:0")["pid"], task(st, "worker:0")["pid"]
    wait_for(lambda: global_step(state, first) > 0, 150, "the first run to train", interval=0.2)
    os.kill(worker_pid, signal.SIGSTOP)
    try:
        assert alive(worker_pid) and task(status(state, first)[1], "ps:0")["pid"] == ps_pid, "not the pids it trains with"
        second_res = start(state, hosts, second)
        wait_for(lambda: not run_processes(second), 150, "every process of the second run to be over")
    finally:
        os.kill(worker_pid, signal.SIGCONT)
    error = [line for line in second_res.stderr.splitlines() if line.startswith("error")][:1]
    said = f"second start: exit {second_res.returncode}{': ' + error[0][:160] if error else ''}"

    def done() -> dict[str, Any] | None:
        step = global_step(state, first)
        if not alive(ps_pid) and step < steps // 2:
            pytest.fail(f"the first run's ps:0 (pid {ps_pid}) exited at global step {step} of {steps}, before its "
                        f"worker finished ({said}); its log: {log_lines(state, first, 'ps:0', 'finish|stand-in')}")
        return ended(state, first)

    st = wait_for(done, 150, f"the first run to end ({said})", interval=1.0)
    assert st["state"] == "finished", (said, st)
    assert task(st, "worker:0")["exit_code"] == 0 and task(st, "worker:0")["restarts"] == 0, st
    assert task(st, "ps:0")["pid"] == ps_pid and task(st, "ps:0")["restarts"] == 0, st


# --- 3. quoting that holds in every context -------------------------------------------------------------
def test_placeholders_inside_quotes_stay_literal(machines: Machines, tmp_path: Path, state: Path) -> None:
    """`command = 'echo "python is {python}" > out.txt'` with `[remote] python` a path holding `$(touch ...)`
    and backticks (a symlink to this interpreter: the supervisors run with it too): no canary file is made
    and out.txt holds the literal path (before the fix `{python}` became a single-quoted word, which
    double quotes do not protect: the shell ran both commands)."""
    canaries = [tmp_path / "CANARY-dollar", tmp_path / "CANARY-backtick"]
    directory = tmp_path / "py" / f"$(touch {canaries[0]})" / f"`touch {canaries[1]}`"
    directory.mkdir(parents=True)
    python = directory / "python"
    python.symlink_to(sys.executable)
    hosts = machines.hosts_toml(tmp_path / "hosts.toml", roles=[["ps", "worker"]],
                                training={"command": 'echo "python is {python}" > out.txt'})
    text = hosts.read_text()
    remote = f"[remote]\npython = {json.dumps(sys.executable)}\n"
    assert remote in text, text
    hosts.write_text(text.replace(remote, f"[remote]\npython = {json.dumps(str(python))}\n"))
    run = unique_run_id("i14-quotes")
    res = start(state, hosts, run)
    assert res.returncode == 0, res.stdout + res.stderr
    st = wait_for(lambda: ended(state, run), 90, f"run {run} to end", interval=0.5)
    outs = {str(p): p.read_text() for d in run_dirs(state, run) for p in Path(d).rglob("out.txt")}
    made = [c.name for c in canaries if c.exists()]
    assert not made, f"the shell ran what the python path holds: {made} made; out.txt: {outs}"
    assert outs and set(outs.values()) == {f"python is {python}\n"}, (outs, st)


# --- 4. robust records, escaped markup -------------------------------------------------------------------
def last_line(res: subprocess.CompletedProcess[str]) -> str:
    return ((res.stdout + res.stderr).strip().splitlines() or [""])[-1][:150]


def ls_problems(state: Path, run: str, strays: list[str]) -> list[str]:
    """What is wrong with `ls` next to these stray files: not exit 0 (a traceback), the real run not
    listed, or not one warning line naming each file."""
    res = tfcluster(state, "ls")
    which = strays[0] if len(strays) == 1 else f"{len(strays)} strays at once"
    if "Traceback" in res.stderr or res.returncode != 0:
        return [f"{which}: `ls` exit {res.returncode}: {last_line(res)}"]
    lines = (res.stdout + res.stderr).splitlines()
    unnamed = [name for name in strays if sum(name in line for line in lines) != 1]
    if run not in res.stdout or unnamed:
        return [f"{which}: `ls` exit 0, but no one-line warning naming {unnamed} (or {run} not listed)"]
    return []


def test_stray_run_records_and_markup_in_an_address_never_make_a_traceback(
    machines: Machines, tmp_path: Path, state: Path
) -> None:
    """One stray file next to a real run's record in the state dir's runs/ (`[]`, `null`, a record whose
    plan is a string, a record whose `created` is a string), then those and two bare objects at once:
    `ls` exits 0, lists the real run and names each skipped file in one line; `status` (the latest run)
    exits 0 without a traceback (before the fix: AttributeError/TypeError tracebacks). And `plan` of a
    hosts.toml with `address = "[/]"` prints no Rich MarkupError traceback."""
    hosts = machines.hosts_toml(tmp_path / "hosts.toml", roles=[["ps", "worker"]], training={"command": "true"})
    run = unique_run_id("i14-real")
    res = start(state, hosts, run)
    assert res.returncode == 0, res.stdout + res.stderr
    wait_for(lambda: ended(state, run), 90, f"run {run} to end", interval=0.5)
    real = json.loads((state / "runs" / f"{run}.json").read_text())
    strays = {
        "stray-list.json": "[]",
        "stray-null.json": "null",
        "stray-plan.json": json.dumps({**real, "run_id": "stray-plan", "created": real["created"] + 1, "plan": "oops"}),
        "stray-created.json": json.dumps({**real, "run_id": "stray-created", "created": "x"}),
        "stray-bare-plan.json": json.dumps({"plan": "oops"}),
        "stray-bare-created.json": json.dumps({"created": "x"}),
    }
    problems = []
    for name, content in strays.items():  # one at a time: each file's own effect on `ls`
        if name.startswith("stray-bare"):
            continue
        stray = state / "runs" / name
        stray.write_text(content)
        try:
            problems += ls_problems(state, run, [name])
        finally:
            stray.unlink()
    for name, content in strays.items():  # then all of them at once, for `ls` and for `status`
        (state / "runs" / name).write_text(content)
    problems += ls_problems(state, run, list(strays))
    res = tfcluster(state, "status")
    if "Traceback" in res.stderr or res.returncode != 0:
        problems.append(f"`status` (the latest run) exit {res.returncode}: {last_line(res)}")
    bad = machines.hosts_toml(tmp_path / "bad.toml", roles=[["ps"], ["worker"]], host_extra={1: {"address": "[/]"}})
    res = tfcluster(state, "plan", str(bad))
    if "Traceback" in res.stderr or not ((res.returncode == 0 and "[/]" in res.stdout) or res.returncode == 2):
        problems.append(f'plan with address "[/]": exit {res.returncode}: {last_line(res)}')
    assert not problems, "; ".join(problems)


# --- a live run shared by tests 2 and 5 (one TensorFlow cluster start instead of two) --------------------
@dataclass
class LiveRun:
    state: Path
    run: str
    checkpoints: Path


@pytest.fixture(scope="module")
def live(machines: Machines, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveRun]:
    """ps:0 on m0, worker:0 (the chief) on m1, worker:1 on m2; checkpoints every CHECKPOINT_EVERY steps;
    paced trainers and steps without end: the run lasts until the tests stop it."""
    tmp = tmp_path_factory.mktemp("i14-live")
    state = tmp / "state"
    hosts = machines.hosts_toml(tmp / "hosts.toml", roles=[["ps"], ["worker"], ["worker"]],
                                training={**TINY, "steps": 10**7, "checkpoint_dir": str(tmp / "ckpt"),
                                          "checkpoint_every_steps": CHECKPOINT_EVERY,
                                          "slowdown": {"worker:0": 3.0, "worker:1": 3.0}})
    run = unique_run_id("i14-live")
    try:
        res = start(state, hosts, run)
        assert res.returncode == 0, res.stdout + res.stderr
        yield LiveRun(state, run, tmp / "ckpt")
    finally:
        clean_up(state)


def checkpoint_steps(directory: Path) -> list[int]:
    found = (re.search(r"-(\d+)\.index$", p.name) for p in directory.glob("*.index"))
    return sorted(int(m.group(1)) for m in found if m)


# --- 2. never lose more than the PS lost ---------------------------------------------------------------
def test_restarted_chief_never_rolls_the_global_step_back(live: LiveRun) -> None:
    """SIGKILL of the chief after a checkpoint and some steps more: its supervisor restarts it, and the
    global step every trainer reports never goes back (before the fix the new chief restored the last
    checkpoint into the live PS: the global step fell back to that checkpoint's)."""
    def past_a_checkpoint() -> tuple[int, int] | None:
        saved, step = checkpoint_steps(live.checkpoints), global_step(live.state, live.run)
        # the first checkpoint after the one of step 0 (MonitoredTrainingSession's, at its start)
        return (saved[-1], step) if saved and saved[-1] > 0 and step >= saved[-1] + 40 else None

    chief = task(status(live.state, live.run)[1], "worker:0")["pid"]
    saved, _ = wait_for(past_a_checkpoint, 180, "a checkpoint and some steps more", interval=0.2)
    at = time.time()
    os.kill(chief, signal.SIGKILL)
    step = measure.step_before(points(live.state, live.run), at)
    # the new chief (its first events come after the old one's last) steps, and worker:1 reports after that
    chief_back = wait_for(lambda: measure.first_step_after(points(live.state, live.run), at + 1.0, "worker:0", 10),
                          150, "the restarted chief to train", interval=0.5)
    wait_for(lambda: measure.first_step_after(points(live.state, live.run), chief_back.t, "worker:1"), 60,
             "worker:1 to report after the restarted chief trained", interval=0.5)
    back = [d for d in measure.drops(points(live.state, live.run)) if d[0] > at]
    assert not back, (f"the global step went back after the chief's restart (killed at global step {step}, "
                      f"latest checkpoint at step {saved}): " +
                      ", ".join(f"{name} saw {high} then {low}" for _, name, high, low in back[:4]))


# --- 5. truthful liveness and exit codes ----------------------------------------------------------------
def test_lost_task_is_lost_for_dash_too_and_exit_codes_say_so(live: LiveRun, machines: Machines) -> None:
    """m2's supervisor SIGKILLed, then its worker:1: `status` says `lost` for worker:1 and exits non-zero;
    `dash --once --json` does not show it alive (before the fix: `stalled`, process state `running`) and
    exits non-zero too. Then m2 unreachable (its sshd stopped): both exit non-zero."""
    st = status(live.state, live.run)[1]
    supervisor, worker = host(st, "m2")["supervisor_pid"], task(st, "worker:1")["pid"]
    os.kill(supervisor, signal.SIGKILL)
    wait_for(lambda: not host(status(live.state, live.run)[1], "m2")["supervisor_alive"], 60,
             "status to see m2's supervisor gone", interval=0.5)
    with suppress(ProcessLookupError):  # it may have gone with its supervisor
        os.kill(worker, signal.SIGKILL)

    def lost() -> tuple[int, dict[str, Any]] | None:
        code, st = status(live.state, live.run)
        return (code, st) if task(st, "worker:1")["state"] == "lost" else None

    code, st = wait_for(lost, 60, "status to say worker:1 lost", interval=0.5)
    problems = [] if code != 0 else ["`status` exits 0 with worker:1 lost"]

    def dash(timeout: int) -> tuple[int, dict[str, Any]]:
        """`dash --once --json`, giving up on a host's agent after `timeout` seconds."""
        res = tfcluster(live.state, "dash", live.run, "--once", "--json", "--interval", "0.5", "--timeout", str(timeout))
        assert res.stdout.strip(), res.stdout + res.stderr
        return res.returncode, json.loads(res.stdout)

    code, view = dash(30)
    shown = next(t for t in view["tasks"] if (t["job"], t["task"]) == ("worker", 1))
    if shown["state"] in ALIVE:
        problems.append(f"`dash --once` shows the lost worker:1 {shown['state']} (process state "
                        f"{shown.get('process_state')})")
    if code == 0:
        problems.append("`dash --once` exits 0 with worker:1 lost")
    machines.stop(2)
    try:
        if status(live.state, live.run)[0] == 0:
            problems.append("`status` exits 0 with m2 unreachable")
        if dash(8)[0] == 0:
            problems.append("`dash --once` exits 0 with m2 unreachable")
    finally:
        machines.start(2)
    assert not problems, "; ".join(problems)
