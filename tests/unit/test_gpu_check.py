"""A task the plan gives GPUs that TensorFlow does not see fails for good, with one clear line (issue 35.1).

- the cause, from TensorFlow's build and the lines it printed (recorded from real TensorFlow releases);
- the line's form, and how many GPUs a CUDA_VISIBLE_DEVICES gives;
- TeeStderr keeps what is written to file descriptor 2 (TensorFlow's C++ log) and still passes it on;
- the supervisor never restarts a built-in task that exits CANNOT_RUN_HERE (a real supervisor, tiny python
  tasks), yet a user's program exiting 78 keeps its restarts; the error `status` shows is the line, whole;
- and counts a built-in GPU task up for `start` only once it wrote that TensorFlow sees its GPUs.
Nothing here fakes a GPU.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.helpers.supervisor_runs import REPO, make_run, read_task_state, start_supervisor, task_spec
from tests.helpers.waiting import wait_for
from training.probes.gpu_check import CPU_ONLY_BUILD, NO_REASON, gpu_problem, likely_cause, planned_gpus
from training.run.layout import RUN_DIR_ENV
from training.supervisor.exit_reason import MAX_CHARS, exit_reason
from training.supervisor.policy import CANNOT_RUN_HERE, restart_cannot_fix

# What TensorFlow 2.x printed on stderr in each case (its C++ log lines, as a task's log holds them).
OLD_TF_NO_CUDART = [
    "2021-05-04 10:00:00.123: W tensorflow/stream_executor/platform/default/dso_loader.cc:64] Could not load "
    "dynamic library 'libcudart.so.11.0'; dlerror: libcudart.so.11.0: cannot open shared object file: No such "
    "file or directory",
]
NEW_TF_NO_LIBS = [
    "2024-03-01 09:00:00.000000: W tensorflow/core/common_runtime/gpu/gpu_device.cc:2256] Cannot dlopen some GPU "
    "libraries. Please make sure the missing libraries mentioned above are installed properly if you would like "
    "to use GPU. Follow the guide at https://www.tensorflow.org/install/pip for how to download and setup the "
    "required libraries for your platform.",
    "Skipping registering GPU devices...",
]
OLD_DRIVER = [
    "2022-01-01 00:00:00.000000: E tensorflow/stream_executor/cuda/cuda_driver.cc:271] failed call to cuInit: "
    "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH: system has unsupported display driver / cuda driver combination",
]
INSUFFICIENT = [
    "2022-01-01 00:00:00.000000: E tensorflow/core/common_runtime/gpu/gpu_device.cc:1000] could not create "
    "stream: CUDA driver version is insufficient for CUDA runtime version",
]


def test_the_cause_comes_from_the_build_then_from_what_tensorflow_printed() -> None:
    assert likely_cause(False, NEW_TF_NO_LIBS) == CPU_ONLY_BUILD  # a CPU-only build says nothing else
    assert "install tensorflow[and-cuda]" in CPU_ONLY_BUILD and "CPU-only build" in CPU_ONLY_BUILD
    assert likely_cause(True, OLD_TF_NO_CUDART).startswith('CUDA libraries not found ("Could not load dynamic')
    assert likely_cause(True, NEW_TF_NO_LIBS).startswith('CUDA libraries not found ("Cannot dlopen some GPU')
    assert "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH" in likely_cause(True, OLD_DRIVER)
    assert likely_cause(True, INSUFFICIENT).startswith("the NVIDIA driver is older than this TensorFlow's CUDA")
    assert likely_cause(True, ["2024-01-01 I some unrelated line"]) == NO_REASON


def test_the_line_names_who_the_devices_what_tensorflow_saw_and_why() -> None:
    assert (planned_gpus(""), planned_gpus(None), planned_gpus("0"), planned_gpus("2,3")) == (0, 0, 1, 2)
    line = gpu_problem("worker:0 on gpu-a", "2,3", 1, CPU_ONLY_BUILD)
    assert line == f"worker:0 on gpu-a: CUDA_VISIBLE_DEVICES=2,3 but TensorFlow sees 1 GPU: {CPU_ONLY_BUILD}"
    assert "TensorFlow sees 0 GPUs:" in gpu_problem("w", "0", 0, "why")


def test_tee_keeps_what_goes_to_fd_2_and_still_passes_it_on() -> None:
    program = (
        "import os, sys\n"
        "from training.probes.gpu_check import TeeStderr\n"
        "with TeeStderr() as tee:\n"
        "    os.write(2, b'W native: Could not load dynamic library x\\n')\n"
        "    print('python line', file=sys.stderr)\n"
        "    os.write(2, b'no newline at the end')\n"
        "print(repr(tee.lines))\n"
        "os.write(2, b'after\\n')\n"
    )
    out = subprocess.run([sys.executable, "-c", program], cwd=REPO, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == repr(["W native: Could not load dynamic library x", "python line",
                                       "no newline at the end"])
    assert out.stderr == "W native: Could not load dynamic library x\npython line\nno newline at the endafter\n"


def test_exit_code_policy_ends_only_a_builtin_task_for_good() -> None:
    assert restart_cannot_fix({"uses_user_command": False}, CANNOT_RUN_HERE)
    assert restart_cannot_fix({}, CANNOT_RUN_HERE)
    assert not restart_cannot_fix({"uses_user_command": True}, CANNOT_RUN_HERE)  # a user's own 78
    assert not restart_cannot_fix({"uses_user_command": False}, 1)
    assert not restart_cannot_fix({"uses_user_command": False}, None)


LINE = gpu_problem("worker:0 on gpu-node-17.example.org", "0,1,2,3", 0, CPU_ONLY_BUILD)
# A task failing as training/task.py fails it: TensorFlow's own lines, then its one line through logging.
TASK = (
    "import logging, sys\n"
    "logging.basicConfig(level=logging.INFO, stream=sys.stderr,"
    " format='%(asctime)s %(levelname)s [worker:0] %(message)s')\n"
    f"print({OLD_TF_NO_CUDART[0]!r}, file=sys.stderr)\n"
    f"logging.getLogger('t').error({LINE!r})\n"
    f"sys.exit({CANNOT_RUN_HERE})\n"
)


def _ended(tmp_path: Path, cleanup: Any, uses_user_command: bool) -> dict[str, Any]:
    layout = make_run(tmp_path, [task_spec("worker", 0, TASK)], max_restarts=2, backoff=0.05)
    run = json.loads(Path(layout.run_file).read_text())
    run["plan"]["uses_user_command"] = uses_user_command
    Path(layout.run_file).write_text(json.dumps(run))
    sup = start_supervisor(layout)
    cleanup[0].append(sup)
    assert sup.wait(timeout=30) == 1  # the run failed
    return read_task_state(layout, "worker", 0)


def test_a_builtin_task_that_cannot_run_here_is_not_restarted_and_its_line_is_the_error(
        tmp_path: Path, cleanup: Any) -> None:
    st = _ended(tmp_path, cleanup, uses_user_command=False)
    assert st["final"] and st["exit_code"] == CANNOT_RUN_HERE and st["restarts"] == 0, st
    assert st["error"] == LINE  # whole: the log line's time, level and task name are not part of it
    assert len(LINE) + len("2026-12-06 21:50:18,123 ERROR [worker:0] ") > MAX_CHARS  # with them: cut


def test_a_users_program_exiting_78_keeps_its_restarts(tmp_path: Path, cleanup: Any) -> None:
    st = _ended(tmp_path, cleanup, uses_user_command=True)
    assert st["final"] and st["exit_code"] == CANNOT_RUN_HERE and st["restarts"] == 2, st


def test_exit_reason_drops_a_task_log_prefix(tmp_path: Path) -> None:
    log = tmp_path / "w.log"
    log.write_text("2026-12-03 13:00:05,000 INFO [worker:0] step 1\n"
                   "2026-12-03 13:00:06,000 ERROR [worker:0] ValueError: bad\n")
    assert exit_reason(str(log)) == "ValueError: bad"


def test_a_builtin_gpu_task_is_up_for_start_only_once_it_has_seen_its_gpus(tmp_path: Path, cleanup: Any) -> None:
    """`start`'s readiness (the supervisor's --detach report) waits for a built-in GPU task's mark that
    TensorFlow sees its GPUs, long after `settle`: the task here is a tiny program writing that mark when
    the test says so (what training/task.py writes after its check); no GPU, real or faked."""
    release = tmp_path / "release"
    layout = make_run(tmp_path, [])
    mark = layout.gpus_seen_file("worker", 0)
    program = (f"import os, time\nwhile not os.path.exists({str(release)!r}): time.sleep(0.02)\n"
               f"open({mark!r}, 'w').write('0')\ntime.sleep(60)\n")
    task = task_spec("worker", 0, program)
    task["env"]["CUDA_VISIBLE_DEVICES"] = "0"
    run = json.loads(Path(layout.run_file).read_text())
    run["plan"]["tasks"] = [task]
    run["supervisor"]["settle"] = 0.01
    Path(layout.run_file).write_text(json.dumps(run))
    cleanup[1].append(layout.root)
    env = {**os.environ, "PYTHONPATH": str(REPO), RUN_DIR_ENV: layout.root}
    launcher = subprocess.Popen([sys.executable, "-S", "-m", "training.supervisor", "--detach", "--run-dir",
                                 layout.root, "--host", "h1", "--ready-timeout", "120"], env=env, cwd=layout.code,
                                stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        # the supervisor's first look at its tasks' processes comes a second after they started: by then
        # `settle` has long passed, yet the task has not said it sees its GPUs
        wait_for(lambda: Path(layout.facts_file("h1")).exists(), 60, "the supervisor's facts file")
        assert launcher.poll() is None, "start was told the task is up before it saw its GPUs"
        release.touch()
        out, _ = launcher.communicate(timeout=60)
    finally:
        if launcher.poll() is None:
            launcher.kill()
            launcher.wait()
    assert launcher.returncode == 0 and "ALIVE" in out, out
    assert Path(mark).exists()
