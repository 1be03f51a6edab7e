"""GPU use per task (issue 35 item 3): nvidia-smi's CSV parsed, compute processes matched to the run's tasks
by their environment markers (real processes, a `sh -c` wrapped one whose real program is a child), the
`on CPU?` rule against a clock, and the figures as `status --json` and Prometheus show them.

No GPU here: a reading is handed to the supervisor's facts writer through its sampler's `read` function
(the one seam where nvidia-smi or NVML would answer); everything else is real.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from orchestrator.config.schema import Config
from orchestrator.monitor.gpu_use import cuda_gpus, on_cpu_suspected
from orchestrator.monitor.prometheus import render
from orchestrator.monitor.reducer import ClusterState
from orchestrator.monitor.state_json import state_json
from orchestrator.plan.from_file import plan_config
from tests.helpers.state_events import feed
from tests.helpers.waiting import wait_for
from training.run.layout import RunLayout
from training.telemetry.gpu_use import GpuReading, GpuSampler, attribute, parse_apps, parse_gpus
from training.telemetry.host_facts import FactsWriter, read_facts
from training.telemetry.schema import make_event

# What `nvidia-smi --query-gpu=index,uuid,utilization.gpu,memory.used,memory.total,temperature.gpu,power.draw
# --format=csv,noheader,nounits` prints: two busy data-centre GPUs, then a GPU that reports no power draw
# and a MIG-enabled one with no utilisation ("[N/A]", "[Not Supported]"), and the line it prints with no driver.
GPU_CSV = """\
0, GPU-3f2a91c4-6b0e-8d7a-52c1-9e4b0f7d1a23, 97, 30512, 40960, 67, 291.52
1, GPU-b81d5e07-2c4a-4f19-a6e3-70d2c9b5e841, 0, 4, 40960, 31, 52.10
2, GPU-0a1b2c3d-4e5f-6a7b-8c9d-0e1f2a3b4c5d, 12, 1023, 8192, 45, [N/A]
3, GPU-9f8e7d6c-5b4a-3928-1706-f5e4d3c2b1a0, [N/A], 0, 81920, 38, [Not Supported]
No devices were found
"""
# `nvidia-smi --query-compute-apps=pid,gpu_uuid,used_memory --format=csv,noheader,nounits`: one line per
# process per GPU; "[N/A]" where the driver cannot say (WDDM, some containers).
APPS_CSV = """\
4242, GPU-3f2a91c4-6b0e-8d7a-52c1-9e4b0f7d1a23, 30000
4243, GPU-3f2a91c4-6b0e-8d7a-52c1-9e4b0f7d1a23, 500
4244, GPU-0a1b2c3d-4e5f-6a7b-8c9d-0e1f2a3b4c5d, [N/A]
"""
IDLE = "import time\ntime.sleep(120)\n"


def test_the_per_gpu_query_is_parsed_with_what_a_gpu_cannot_say_as_none() -> None:
    gpus = parse_gpus(GPU_CSV)
    assert [g["index"] for g in gpus] == [0, 1, 2, 3]  # the no-driver line is no GPU
    assert gpus[0] == {"index": 0, "uuid": "GPU-3f2a91c4-6b0e-8d7a-52c1-9e4b0f7d1a23", "util_pct": 97.0,
                       "mem_used_mb": 30512.0, "mem_total_mb": 40960.0, "temp_c": 67.0, "power_w": 291.52}
    assert gpus[2]["power_w"] is None and gpus[2]["util_pct"] == 12.0
    assert gpus[3]["util_pct"] is None and gpus[3]["power_w"] is None and gpus[3]["temp_c"] == 38.0
    assert parse_gpus("") == []


def test_the_compute_apps_query_is_parsed() -> None:
    assert parse_apps(APPS_CSV) == [(4242, "GPU-3f2a91c4-6b0e-8d7a-52c1-9e4b0f7d1a23", 30000.0),
                                    (4243, "GPU-3f2a91c4-6b0e-8d7a-52c1-9e4b0f7d1a23", 500.0),
                                    (4244, "GPU-0a1b2c3d-4e5f-6a7b-8c9d-0e1f2a3b4c5d", None)]
    assert parse_apps("") == []  # no process on any GPU: nvidia-smi prints nothing


def test_attribution_sums_a_tasks_processes_per_gpu_and_ignores_strangers() -> None:
    reading = GpuReading(0.0, parse_gpus(GPU_CSV), [*parse_apps(APPS_CSV), (9999, "GPU-unknown", 7.0)])
    tasks = {4242: "worker-0", 4243: "worker-0", 4244: "worker-1"}
    assert attribute(reading, tasks.get) == {"worker-0": {"0": 30500.0}, "worker-1": {"2": None}}


def test_on_cpu_is_said_only_once_settled_and_only_of_nothing_held() -> None:
    since, settle = 1000.0, 20.0
    assert not on_cpu_suspected((0,), {}, since, since + settle - 0.1, settle)  # still starting up
    assert on_cpu_suspected((0,), {}, since, since + settle, settle)
    assert on_cpu_suspected((0,), {0: 0.0}, since, since + 60, settle)
    assert not on_cpu_suspected((0,), {0: 512.0}, since, since + 60, settle)
    assert not on_cpu_suspected((0,), {1: 512.0}, since, since + 60, settle)  # on another GPU: not on the CPU
    assert not on_cpu_suspected((0,), {0: None}, since, since + 60, settle)  # held, amount unknown
    assert not on_cpu_suspected((0,), None, since, since + 60, settle)  # the GPUs were not read
    assert not on_cpu_suspected((), {}, since, since + 60, settle)  # planned on the CPU
    assert not on_cpu_suspected((0,), {}, None, since + 60, settle)  # not running
    assert cuda_gpus("0,1") == (0, 1) and cuda_gpus("") == () and cuda_gpus("3") == (3,)


def _start(run_dir: Path, task_id: str, wrap: bool = False) -> subprocess.Popen[bytes]:
    """A process of the run's task `task_id` as a supervisor starts it (its environment markers), returned
    once it has exec'd; `wrap`: `sh -c "python ...; true"`, whose real program is a child of the task pid."""
    env = {**os.environ, "TFCLUSTER_RUN_DIR": str(run_dir), "TFCLUSTER_TASK_ID": task_id}
    argv = ["sh", "-c", f"{sys.executable} -c '{IDLE}'; true"] if wrap else [sys.executable, "-c", IDLE]
    proc = subprocess.Popen(argv, env=env)
    marker = f"TFCLUSTER_TASK_ID={task_id}".encode()
    wait_for(lambda: marker in Path(f"/proc/{proc.pid}/environ").read_bytes().split(b"\0"), 10, f"{task_id} to exec")
    return proc


@pytest.fixture
def procs() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for p in started:
        for child in psutil.Process(p.pid).children(recursive=True) if p.poll() is None else []:
            child.kill()
        p.kill()
        p.wait()


def test_facts_give_each_task_the_memory_its_own_processes_hold(tmp_path: Path,
                                                                 procs: list[subprocess.Popen[bytes]]) -> None:
    run, other = tmp_path / "run", tmp_path / "other-run"
    layout = RunLayout(str(run))
    Path(layout.facts_file("g")).parent.mkdir(parents=True)
    procs += [_start(run, "worker-0#0", wrap=True), _start(run, "worker-1#0"), _start(other, "worker-0#0")]
    program = wait_for(lambda: psutil.Process(procs[0].pid).children(), 10, "sh to start its program")[0].pid
    gpus = parse_gpus(GPU_CSV)[:2]
    uuid0, uuid1 = gpus[0]["uuid"], gpus[1]["uuid"]
    # worker:0's real program (a child of its task pid) holds 3000 MiB on GPU 0; another run's process
    # holds 700 MiB on GPU 1; worker:1's process holds nothing anywhere.
    apps = [(program, uuid0, 3000.0), (procs[2].pid, uuid1, 700.0)]
    sampler = GpuSampler(lambda: GpuReading(time.time(), gpus, apps), every_s=0.05)
    writer = FactsWriter(layout, "g", {"worker-0": None, "worker-1": None}, gpus=sampler)

    def written() -> dict | None:
        writer.update()
        doc = json.loads(Path(layout.facts_file("g")).read_text())
        return doc if "gpus" in doc else None

    doc = wait_for(written, 10, "the sampler's first reading in the facts")
    assert doc["tasks"]["worker-0"]["gpu_mem"] == {"0": 3000.0}
    assert doc["tasks"]["worker-1"]["gpu_mem"] == {}
    assert [g["index"] for g in doc["gpus"]] == [0, 1] and doc["gpus"][0]["power_w"] == 291.52
    assert read_facts(layout, "g")["gpus"] == doc["gpus"]  # what the agent sends, with no supervisor state yet


def test_no_gpu_reader_writes_no_gpu_fields(tmp_path: Path) -> None:
    layout = RunLayout(str(tmp_path / "run"))
    Path(layout.facts_file("g")).parent.mkdir(parents=True)
    FactsWriter(layout, "g", {"worker-0": None}, find_gpus=False).update()
    doc = json.loads(Path(layout.facts_file("g")).read_text())
    assert "gpus" not in doc and "gpu_mem" not in doc["tasks"]["worker-0"]


def test_pids_of_another_namespace_leave_each_tasks_memory_unknown(tmp_path: Path) -> None:
    """A container without the host's pid namespace: the driver names pids that are no process here. No
    task is then said to hold nothing (that would flag every GPU task `on CPU?`)."""
    layout = RunLayout(str(tmp_path / "run"))
    Path(layout.facts_file("g")).parent.mkdir(parents=True)
    gpus = parse_gpus(GPU_CSV)[:1]
    sampler = GpuSampler(lambda: GpuReading(time.time(), gpus, [(2**31 - 2, gpus[0]["uuid"], 900.0)]), every_s=0.05)
    writer = FactsWriter(layout, "g", {"worker-0": None}, gpus=sampler)

    def written() -> dict | None:
        writer.update()
        doc = json.loads(Path(layout.facts_file("g")).read_text())
        return doc if "gpus" in doc else None

    doc = wait_for(written, 10, "the sampler's first reading in the facts")
    assert "gpu_mem" not in doc["tasks"]["worker-0"]


def test_a_reading_too_old_is_not_current() -> None:
    sampler = GpuSampler(lambda: GpuReading(time.time() - 60, [], []), every_s=0.05)
    assert wait_for(lambda: sampler.latest() is not None, 10, "a first reading")
    assert sampler.latest(max_age_s=10) is None


def _state(settle_s: float) -> ClusterState:
    """A host `g` with gpus [0, 1]: ps:0 on the CPU, worker:0 on GPU 0, worker:1 on GPU 1."""
    plan = plan_config(Config.model_validate({
        "training": {"command": "{python} prog.py"},
        "hosts": [{"name": "g", "address": "127.0.0.1", "roles": ["ps", "worker"], "gpus": [0, 1]}]}))
    st = ClusterState.from_plan(plan, "r", now=1000.0)
    st.gpu_settle_s = settle_s
    return st


def _sample(t: float) -> dict:
    gpus = [dict(g) for g in parse_gpus(GPU_CSV)[:2]]
    tasks = {"worker-0": {"procs": 2, "cpu_s": 1.0, "cpu_moved_at": t, "gpu_mem": {"0": 3000.0}},
             "worker-1": {"procs": 1, "cpu_s": 1.0, "cpu_moved_at": t, "gpu_mem": {}},
             "ps-0": {"procs": 1, "cpu_s": 1.0, "cpu_moved_at": t, "gpu_mem": {}}}
    return make_event("host_sample", "g", t=t, cpu_pct=5.0, mem_pct=5.0, gpus=gpus, tasks=tasks,
                      supervisor={"alive": True, "state": "running"})


def test_status_json_and_prometheus_show_gpu_use_per_task_and_on_cpu_once_settled() -> None:
    st = _state(settle_s=20.0)
    for job, i, pid in (("ps", 0, 10), ("worker", 0, 11), ("worker", 1, 12)):
        feed(st, make_event("task_state", "g", t=1000.0, job=job, task=i, state="running", pid=pid), 1000.0)
    for t in (1010.0, 1019.5, 1020.0):
        feed(st, make_event("heartbeat", "g", t=t, interval_s=1.0), t)
        feed(st, _sample(t), t)
        st.tick(t)
        tasks = {x["name"]: x for x in state_json(st)["tasks"]}
        assert tasks["worker:0"]["gpu_use"] == [{"index": 0, "util_pct": 97.0, "mem_used_mb": 30512.0,
                                                 "mem_total_mb": 40960.0, "task_mem_mb": 3000.0}]
        assert tasks["worker:1"]["gpu_use"][0]["task_mem_mb"] == 0.0
        assert tasks["ps:0"]["gpu_use"] == [] and not tasks["ps:0"]["on_cpu_suspected"]  # planned on the CPU
        assert not tasks["worker:0"]["on_cpu_suspected"]
        # worker:1 has run for 20 s (settle_s) only at 1020
        assert tasks["worker:1"]["on_cpu_suspected"] == (t >= 1020.0), t
    host = state_json(st)["hosts"][0]
    assert host["gpus"][0] == {"index": 0, "uuid": "GPU-3f2a91c4-6b0e-8d7a-52c1-9e4b0f7d1a23", "util_pct": 97.0,
                                    "mem_used_mb": 30512.0, "mem_total_mb": 40960.0, "temp_c": 67.0, "power_w": 291.5}
    text = render(st)
    assert 'tfcluster_task_gpu_memory_mib{task="worker:0",job="worker",host="g",gpu="0"} 3000' in text
    assert 'tfcluster_task_gpu_utilization_percent{task="worker:0",job="worker",host="g",gpu="0"} 97' in text
    assert 'tfcluster_task_on_cpu_suspected{task="worker:1",job="worker",host="g"} 1' in text
    assert 'tfcluster_task_on_cpu_suspected{task="worker:0",job="worker",host="g"} 0' in text
    assert 'tfcluster_host_gpu_temperature_celsius{host="g",gpu="0"} 67' in text
    assert 'tfcluster_host_gpu_power_watts{host="g",gpu="1"} 52.1' in text
    # A new process of worker:1 must settle again before it is judged
    feed(st, make_event("task_state", "g", t=1021.0, job="worker", task=1, state="running", pid=99), 1021.0)
    st.tick(1021.0)
    assert not st.tasks["worker:1"].on_cpu_suspected


def test_the_agent_sends_the_supervisors_gpu_reading_without_querying_again(tmp_path: Path) -> None:
    """The live dashboard's path: the agent's host_sample carries the facts' GPUs and each task's memory
    (one reading per host per sample: the agent asks nvidia-smi only when no facts carry them)."""
    from io import StringIO

    from orchestrator.monitor.events import EventParser, HostSampleEvent
    from training.agent.core import Agent

    layout = RunLayout(str(tmp_path / "run"))
    Path(layout.facts_file("g")).parent.mkdir(parents=True)
    gpus = parse_gpus(GPU_CSV)[:2]
    Path(layout.facts_file("g")).write_text(json.dumps({"host": "g", "t": 1.0, "gpus": gpus, "tasks": {
        "worker-0": {"procs": 1, "cpu_s": 1.0, "stopped": False, "gpu_mem": {"0": 3000.0}}}}))
    agent = Agent(layout.root, "g", 1.0, StringIO())
    agent.gpu_tool = False  # as on this machine: were the facts not used, the sample would have no GPU
    ev = EventParser().parse(agent.sample())
    assert isinstance(ev, HostSampleEvent)
    assert [(g.index, g.temp_c, g.power_w) for g in ev.gpus] == [(0, 67.0, 291.52), (1, 31.0, 52.1)]
    assert ev.tasks["worker:0"].gpu_mem == {0: 3000.0}
