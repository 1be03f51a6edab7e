"""The suite's own measuring tools (issue 32): scripts/stress.py's junit reading, failure table, verdict and
record; scripts/suite_runs.py's tiers, `make test` command, profile merging, ten tests by CPU and record (old
runs without the new fields included); tests/helpers/profile.py's run id, TensorFlow test and sampler (real
processes, one detached as a run's processes are). Real files in tmp_path."""

from __future__ import annotations

import importlib.util
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import psutil
import pytest

from tests.helpers import profile
from tests.helpers.waiting import wait_for
from tests.integration.lifecycle_helpers import unique_run_id

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"


def load_script(name: str) -> ModuleType:
    """scripts/ is no package: its modules load by path, under their bare names (suite_runs imports stress
    so, as it does when run from scripts/)."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


stress = load_script("stress")
suite_runs = load_script("suite_runs")

# One test of each tier: a unit test that passed (in a class), an integration test that failed, a Slurm test
# that errored in its setup, a fault stage that failed and then errored in its teardown (two testcases, as
# pytest writes it), and a skipped one.
JUNIT = """<?xml version="1.0" encoding="utf-8"?><testsuites name="pytest tests">
<testsuite name="pytest" errors="2" failures="2" skipped="1" tests="5" time="80.0">
<testcase classname="tests.unit.test_plan.TestShapes" name="test_one_ps[2]" time="0.250" />
<testcase classname="tests.integration.test_lifecycle" name="test_sigkilled_worker_is_restarted" time="12.5">
<failure message="AssertionError: timed out after 60s waiting for a restart&#10;  second line">long
text</failure></testcase>
<testcase classname="tests.integration.test_slurm_lifecycle" name="test_each_mode[tf2]@slurm" time="3.0">
<error message="failed on setup with &quot;RuntimeError: slurmctld did not start&quot;">trace</error></testcase>
<testcase classname="tests.faults.test_host_faults" name="test_cut@faults-test_host_faults" time="40.0">
<failure message="assert 1 == 2">trace</failure></testcase>
<testcase classname="tests.faults.test_host_faults" name="test_cut@faults-test_host_faults" time="4.0">
<error message="failed on teardown with &quot;OSError: gone&quot;">trace</error></testcase>
<testcase classname="tests.unit.test_plan" name="test_gpu" time="0.001">
<skipped type="pytest.skip" message="no GPU">skipped</skipped></testcase>
</testsuite></testsuites>
"""


def test_read_junit_gives_each_test_once_with_its_outcome_time_and_first_failure_line() -> None:
    results = {r.nodeid: r for r in stress.read_junit(JUNIT)}
    assert list(results) == [
        "tests/unit/test_plan.py::TestShapes::test_one_ps[2]",
        "tests/integration/test_lifecycle.py::test_sigkilled_worker_is_restarted",
        "tests/integration/test_slurm_lifecycle.py::test_each_mode[tf2]@slurm",
        "tests/faults/test_host_faults.py::test_cut@faults-test_host_faults",
        "tests/unit/test_plan.py::test_gpu",
    ]
    assert [(r.outcome, r.seconds, r.first_line) for r in results.values()] == [
        ("passed", 0.25, ""),
        ("failed", 12.5, "AssertionError: timed out after 60s waiting for a restart"),
        ("error", 3.0, 'failed on setup with "RuntimeError: slurmctld did not start"'),
        ("failed", 44.0, "assert 1 == 2"),  # the call's failure; its teardown's time added
        ("skipped", 0.001, "no GPU"),
    ]
    assert stress.outcome_counts(list(results.values())) == {"passed": 1, "failed": 2, "error": 1, "skipped": 1}
    assert stress.result_text({"passed": 1, "failed": 2, "error": 1, "skipped": 0}) == "2 failed, 1 error, 1 passed"


def test_a_collection_error_names_its_module() -> None:
    xml = ('<testsuites><testsuite><testcase classname="" name="tests.faults.test_mode_faults" time="0">'
           '<error message="collection failure">ImportError</error></testcase></testsuite></testsuites>')
    assert [(r.nodeid, r.outcome) for r in stress.read_junit(xml)] == [("tests/faults/test_mode_faults.py", "error")]


def test_tier_times_sum_each_tier_and_count_its_tests() -> None:
    tiers = suite_runs.tier_times(stress.read_junit(JUNIT))
    assert tiers == {"unit": {"s": 0.251, "tests": 2}, "integration": {"s": 12.5, "tests": 1},
                     "slurm": {"s": 3.0, "tests": 1}, "faults": {"s": 44.0, "tests": 1}}
    assert suite_runs.tier_of("tests/unit/test_slurm_config.py::test_x") == "unit"  # no Slurm cluster there
    assert suite_runs.tier_line(tiers) == ("unit 0.3 s (2 tests), integration (without Slurm) 12.5 s (1 tests), "
                                           "Slurm 3.0 s (1 tests), faults 44.0 s (1 tests)")


def stress_round(number: int, failures: list[tuple[str, str]], exit_code: int | None = None) -> Any:
    counts = {"passed": 10 - len(failures), "failed": len(failures), "error": 0, "skipped": 0}
    return stress.Round(number, (1 if failures else 0) if exit_code is None else exit_code, counts, 300.0 + number,
                        [1.0, 2.0, 3.0], [4.0, 5.0, 6.0],
                        [{"nodeid": n, "outcome": "failed", "first_line": line} for n, line in failures])


def new_stress(rounds: list[Any]) -> Any:
    return stress.Stress(5, 3, 2, "abc1234", "2026-12-06 18:00 UTC", "python -m pytest ...", rounds)


def test_stress_record_sorts_the_failures_by_count_and_says_how_many_rounds_failed(tmp_path: Path) -> None:
    rounds = [stress_round(1, [("tests/integration/test_b.py::test_b", "b broke"),
                               ("tests/faults/test_a.py::test_a", "a broke first")]),
              stress_round(2, []),
              stress_round(3, [("tests/faults/test_a.py::test_a", "a broke again")])]
    record = new_stress(rounds)
    stress.write_record(record, tmp_path)
    md = (tmp_path / "stress.md").read_text()
    table = md[md.index("| test | failed in rounds |"):].splitlines()
    assert table[2:4] == ["| tests/faults/test_a.py::test_a | 2 (1, 3) | a broke first |",
                          "| tests/integration/test_b.py::test_b | 1 (1) | b broke |"]
    assert "| 2 | 10 passed | 302.0 s | [1.0, 2.0, 3.0] | [4.0, 5.0, 6.0] | – |" in md
    assert "5 rounds (3 run so far)" in md and "commit abc1234" in md
    assert md.endswith("\n2 of 3 rounds failed\n")
    facts = json.loads((tmp_path / "stress.json").read_text())
    assert facts["verdict"] == "2 of 3 rounds failed"
    assert [r["number"] for r in facts["rounds"]] == [1, 2, 3]
    assert facts["rounds"][0]["failures"][1]["nodeid"] == "tests/faults/test_a.py::test_a"


def test_stress_all_green_and_a_round_that_failed_without_a_failed_test() -> None:
    assert stress.markdown(new_stress([stress_round(1, []), stress_round(2, [])])).endswith("\nall 2 rounds green\n")
    crashed = stress_round(1, [], exit_code=3)  # e.g. a pytest-xdist worker died
    no_xml = stress.Round(2, 2, None, 5.0, [0.0, 0.0, 0.0], [0.0, 0.0, 0.0])
    assert (crashed.green, no_xml.green) == (False, False)
    assert (crashed.result(), no_xml.result()) == ("10 passed (pytest exit 3)", "no junit XML (pytest exit 2)")
    assert stress.verdict([crashed, no_xml, stress_round(3, [])]) == "2 of 3 rounds failed"


def a_round_that_raises(pids: list[int]) -> None:
    with stress.busy_loops(1) as procs:
        pids += [p.pid for p in procs]
        raise RuntimeError("the round failed")


def test_busy_loops_are_killed_when_the_round_raises() -> None:
    pids: list[int] = []
    with pytest.raises(RuntimeError, match="the round failed"):
        a_round_that_raises(pids)
    assert len(pids) == 1
    assert not psutil.pid_exists(pids[0])  # killed and reaped: no orphan, no zombie


def test_make_test_passes_the_junit_path_and_the_plugin_through_make_to_the_shell(tmp_path: Path) -> None:
    junit = tmp_path / "with space" / "junit.xml"
    command = suite_runs.make_test_command(3, junit)
    assert command[:3] == ["make", "test", "TEST_WORKERS=3"]
    name, _, value = command[3].partition("=")
    assert name == "PYTEST_ARGS"
    assert shlex.split(value) == ["--durations=10", f"--junitxml={junit}", "-p", "tests.helpers.profile"]


def profile_entry(nodeid: str, cpu: float, tf: int = 0) -> dict[str, object]:
    return {"nodeid": nodeid, "wall_s": cpu * 2, "cpu_s": cpu, "tf_processes": tf}


def test_profiles_of_the_workers_merge_and_the_ten_tests_by_cpu_come_first(tmp_path: Path) -> None:
    (tmp_path / "profile-gw0.json").write_text(json.dumps([profile_entry(f"t{i}", float(i)) for i in range(6)]))
    (tmp_path / "profile-gw1.json").write_text(json.dumps([profile_entry("u1", 4.0, tf=3),
                                                           *(profile_entry(f"u{i}", 0.5) for i in range(2, 7))]))
    (tmp_path / "junit.xml").write_text(JUNIT)  # not a profile
    merged = suite_runs.read_profiles(tmp_path)
    assert len(merged) == 12
    top = suite_runs.top_by_cpu(merged)
    assert [t["test"] for t in top] == ["t5", "t4", "u1", "t3", "t2", "t1", "u2", "u3", "u4", "u5"]
    assert top[2] == {"cpu_s": 4.0, "wall_s": 8.0, "tf_processes": 3, "test": "u1"}


def test_suite_time_record_renders_old_runs_without_the_new_fields() -> None:
    old = {"commit": "49c0507", "exit": 0, "make_test_s": 936, "wall_with_setup_s": 977.0, "pytest": "866 passed",
           "pytest_s": 935.01, "failed": [], "load_before": [2.88, 7.97, 8.3], "load_after": [4.46, 8.92, 8.81],
           "slowest": [{"s": 127.75, "test": "tests/integration/test_tf2_modes_sshd.py::test_ps"}], "workers": 3,
           "at": "2026-12-05T09:11:17Z", "log": "/tmp/x.log"}
    new = {**old, "commit": "c2fdd74", "exit": 1, "pytest": "1 failed, 869 passed",
           "failed": ["tests/faults/test_host_faults.py::test_cut"], "tf_processes": 57,
           "tiers": suite_runs.tier_times(stress.read_junit(JUNIT)),
           "top_cpu": [{"cpu_s": 61.5, "wall_s": 90.25, "tf_processes": 6, "test": "tests/faults/x.py::test_y"}]}
    md = suite_runs.markdown([old, new])
    assert "each at most 480 s of `make test`" in md
    assert ("| 1 | 49c0507 | 866 passed | 936 s | 977.0 s | [2.88, 7.97, 8.3] | [4.46, 8.92, 8.81] | – |"
            in md.splitlines())
    assert "| 2 | c2fdd74 | FAILED: tests/faults/test_host_faults.py::test_cut | 936 s |" in md
    assert md.count("Tier times of run") == 1 and "Tier times of run 2: unit 0.3 s (2 tests)," in md
    assert md.count("Ten tests by CPU of run") == 1
    assert "- 61.50 s CPU, 90.25 s wall, 6 TF: tests/faults/x.py::test_y" in md
    assert md.count("Ten slowest tests of run") == 2


def test_run_id_is_read_from_a_run_dir_marker() -> None:
    assert profile.run_id_of("/home/u/tfcluster/runs/20261206-1830-ab12/m1") == "20261206-1830-ab12"
    assert profile.run_id_of("/home/u/tfcluster/runs/r1/m1/") == "r1"
    assert profile.run_id_of("/tmp/pytest-1/test_x0/run") is None  # a test's hand-made run dir
    assert profile.run_id_of("") is None
    assert profile.loads_tensorflow("7f1c-7f2c r-xp 00000000 08:01 42 /v/site-packages/tensorflow/libtensorflow_framework.so.2")
    assert not profile.loads_tensorflow("7f1c-7f2c r-xp 00000000 08:01 42 /usr/lib/libpython3.11.so")


BURNER = """import os, sys, time
start = time.process_time()
while time.process_time() - start < 0.3:
    pass
with open(sys.argv[1] + ".tmp", "w") as f:
    f.write(str(os.getpid()))
os.replace(sys.argv[1] + ".tmp", sys.argv[1])
time.sleep(300)  # its life, until the test kills it
"""


def start_burner(pid_file: Path, run_dir: Path, *, detached: bool) -> subprocess.Popen[bytes] | None:
    """A run's process that burns 0.3 s of CPU then sleeps; detached: started by a parent that exits at once
    (as a supervisor's setsid and fork do), so it is no descendant of this process."""
    env = {**os.environ, "TFCLUSTER_RUN_DIR": str(run_dir)}
    burner = [sys.executable, "-c", BURNER, str(pid_file)]
    if detached:
        parent = "import subprocess, sys; subprocess.Popen(sys.argv[1:], start_new_session=True)"
        subprocess.run([sys.executable, "-c", parent, *burner], env=env, check=True)
        return None
    return subprocess.Popen(burner, env=env)


def test_the_sampler_gives_a_detached_run_process_cpu_to_the_test_whose_state_dir_records_the_run(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    state = tmp_path / "state"
    (state / "runs").mkdir(parents=True)
    monkeypatch.setenv("TFCLUSTER_STATE_DIR", str(state))
    # A run id of its own: the sampler counts every process whose run dir names a run the state dir records,
    # and other tests' processes run under ids such as r1
    run_id = unique_run_id("sampler")
    run_dir = tmp_path / "work" / "runs" / run_id / "h1"
    detached, child = tmp_path / "detached.pid", tmp_path / "child.pid"
    start_burner(detached, run_dir, detached=True)
    own = start_burner(child, run_dir, detached=False)  # a descendant: its CPU reaches os.times' children
    try:
        wait_for(lambda: detached.exists() and child.exists(), 60, "both run processes to burn their CPU")
        sampler = profile.Sampler()
        figures, _ = sampler.begin_test()
        sampler.sample()
        assert figures.runs_cpu == 0.0  # the state dir records no such run
        (state / "runs" / f"{run_id}.json").write_text("{}")
        sampler.sample()
        times = psutil.Process(int(detached.read_text())).cpu_times()
        assert figures.runs_cpu == pytest.approx(times.user + times.system, abs=0.02)
        assert figures.runs_cpu >= 0.29
        sampler.sample()
        assert figures.runs_cpu == pytest.approx(times.user + times.system, abs=0.02)  # counted once
        assert figures.tf_processes == 0
    finally:
        if detached.exists():
            psutil.Process(int(detached.read_text())).kill()  # init reaps it
        assert own is not None
        own.kill()
        own.wait()
