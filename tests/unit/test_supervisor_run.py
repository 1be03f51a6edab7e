"""The run-wide rules, with real supervisors talking over their real peer channel on loopback: the success
policy ends a run everywhere, a failure fails it everywhere, multi-worker-mirrored restarts its group,
restart budgets come back after a healthy stretch, a taken port fails a task clearly, and a peer message
of another run (or unsigned) is dropped. Two "hosts" share this machine; tasks are tiny Python programs.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from orchestrator.run.local_ports import free_port_block
from tests.helpers.supervisor_runs import until_released
from tests.helpers.waiting import wait_for
from training.run.layout import RunLayout
from training.supervisor.peers import PeerChannel, encode
from training.supervisor.policy import RestartBudget, needed_for_the_run, outcome, waited_for

REPO = Path(__file__).resolve().parents[2]
FOREVER = "import time\nwhile True: time.sleep(0.2)"  # a task that runs until the run ends it


def task_spec(job: str, index: int, host: str, code: str, *, chief: bool = False, port: int | None = None) -> dict[str, Any]:
    return {"job": job, "index": index, "host": host, "command": [sys.executable, "-c", code], "is_chief": chief,
            "port": port, "in_cluster": port is not None,
            "env": {"TFCLUSTER_JOB": job, "TFCLUSTER_TASK": str(index)}}


class Run:
    """Two loopback "hosts" h0 and h1, each with its own run dir (as on separate machines) and its
    supervisor's control port."""

    def __init__(self, tmp: Path, tasks: list[dict[str, Any]], mode: str = "between-graph",
                 **training: Any) -> None:
        names = sorted({t["host"] for t in tasks})
        base = free_port_block(len(names))
        hosts = [{"name": name, "address": "127.0.0.1", "control_port": base + i} for i, name in enumerate(names)]
        run = {"run_id": "r1", "created": time.time(), "channel_key": secrets.token_hex(32),
               "plan": {"mode": mode, "hosts": hosts, "tasks": tasks,
                        "training": {"restart": "on-failure", "max_restarts": 3, **training}},
               "supervisor": {"backoff_initial": 0.2, "backoff_max": 1.0, "grace": 2.0, "poll": 0.02}}
        self.layouts: dict[str, RunLayout] = {}
        for h in hosts:
            layout = self.layouts[h["name"]] = RunLayout(str(tmp / h["name"] / "runs" / "r1"))
            for d in layout.dirs():
                os.makedirs(d, exist_ok=True)
            Path(layout.run_file).write_text(json.dumps(run))
        self.host_of = {f"{t['job']}-{t['index']}": t["host"] for t in tasks}
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, *hosts: str) -> None:
        for host in hosts or tuple(self.layouts):
            self.procs[host] = subprocess.Popen(
                [sys.executable, "-m", "training.supervisor", "--run-dir", self.layouts[host].root, "--host", host],
                env={**os.environ, "PYTHONPATH": str(REPO)}, start_new_session=True)

    def layout(self, job: str, index: int) -> RunLayout:
        return self.layouts[self.host_of[f"{job}-{index}"]]

    def state(self, job: str, index: int) -> dict[str, Any]:
        try:
            return json.loads(Path(self.layout(job, index).task_state_file(job, index)).read_text())
        except (OSError, ValueError):
            return {}

    def supervisor(self, host: str) -> dict[str, Any]:
        try:
            return json.loads(Path(self.layouts[host].supervisor_state_file(host)).read_text())
        except (OSError, ValueError):
            return {}

    def wait_exit(self, timeout: float = 20.0) -> dict[str, int]:
        return {h: p.wait(timeout=timeout) for h, p in self.procs.items()}

    def close(self) -> None:
        for p in self.procs.values():
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.procs.values():
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)


@pytest.fixture
def runs(tmp_path: Path) -> Any:
    made: list[Run] = []

    def make(tasks: list[dict[str, Any]], **kw: Any) -> Run:
        made.append(Run(tmp_path / str(len(made)), tasks, **kw))
        return made[-1]

    yield make
    for run in made:
        run.close()


def test_the_chief_finishing_ends_the_run_on_every_host(runs: Any, tmp_path: Path) -> None:
    release = tmp_path / "release"  # the chief finishes once every task runs (on both hosts)
    run = runs([task_spec("ps", 0, "h0", FOREVER), task_spec("worker", 0, "h1", until_released(release), chief=True),
                task_spec("worker", 1, "h1", FOREVER)])
    run.start()
    tasks = (("ps", 0), ("worker", 0), ("worker", 1))
    wait_for(lambda: all(run.state(j, i).get("state") == "running" for j, i in tasks), 15, "every task running")
    release.touch()
    assert run.wait_exit() == {"h0": 0, "h1": 0}
    assert run.state("worker", 0)["exit_code"] == 0 and run.state("worker", 0)["stopped_by"] is None
    for job, index in (("ps", 0), ("worker", 1)):
        st = run.state(job, index)
        assert st["final"] and st["stopped_by"] == "run", st
    assert run.supervisor("h0")["outcome"] == run.supervisor("h1")["outcome"] == "finished"


def test_all_workers_waits_for_every_worker(runs: Any, tmp_path: Path) -> None:
    """The chief finishing first ends nothing: worker 1 (running until released, after the chief ended)
    exits 0 by itself, and the ps is ended by the run only after it."""
    release = tmp_path / "release"
    run = runs([task_spec("ps", 0, "h0", FOREVER), task_spec("worker", 0, "h1", "pass", chief=True),
                task_spec("worker", 1, "h1", until_released(release))], success="all-workers")
    run.start()
    wait_for(lambda: run.state("worker", 0).get("final"), 15, "worker 0 done")
    assert not run.state("ps", 0).get("final")  # still serving: worker 1 has not finished
    release.touch()
    assert run.wait_exit() == {"h0": 0, "h1": 0}
    worker1, ps = run.state("worker", 1), run.state("ps", 0)
    assert worker1["exit_code"] == 0 and worker1["stopped_by"] is None, worker1  # never stopped by the run
    assert ps["stopped_by"] == "run" and ps["exited_at"] >= worker1["exited_at"], (ps, worker1)


def test_a_task_failing_for_good_fails_the_run_everywhere(runs: Any) -> None:
    run = runs([task_spec("ps", 0, "h0", FOREVER), task_spec("worker", 0, "h1", FOREVER, chief=True),
                task_spec("worker", 1, "h1", "raise SystemExit(3)")], restart="never")
    run.start()
    assert run.wait_exit() == {"h0": 1, "h1": 1}
    assert run.state("worker", 1)["exit_code"] == 3 and run.state("worker", 1)["stopped_by"] is None
    assert run.state("ps", 0)["stopped_by"] == "run" and run.state("worker", 0)["stopped_by"] == "run"
    assert run.supervisor("h0")["outcome"] == "failed"


def test_multi_worker_mirrored_restarts_the_whole_group(runs: Any) -> None:
    run = runs([task_spec("worker", 0, "h0", FOREVER, chief=True), task_spec("worker", 1, "h1", FOREVER)],
               mode="multi-worker-mirrored")
    run.start()
    wait_for(lambda: run.state("worker", 0).get("state") == "running" and run.state("worker", 1).get("state") == "running",
             15, "worker-0 and worker-1 running")
    first = run.state("worker", 0)["pid"]
    os.kill(run.state("worker", 1)["pid"], signal.SIGKILL)
    wait_for(lambda: run.state("worker", 0).get("restarts") == 1 and run.state("worker", 0).get("state") == "running",
             15, "worker 0 restarted with its group")
    events = [json.loads(line) for line in Path(run.layouts["h0"].supervisor_events_file("h0")).read_text().splitlines()]
    assert any(e["state"] == "restarting" and e["restart_reason"] == "group" for e in events)
    assert run.state("worker", 0)["pid"] != first
    wait_for(lambda: run.state("worker", 1).get("state") == "running" and run.state("worker", 1).get("restarts") == 1,
             15, "worker-1 restarted with its group")
    assert run.supervisor("h0")["epoch"] == run.supervisor("h1")["epoch"] == 1


def test_a_healthy_stretch_gives_the_restart_budget_back(runs: Any) -> None:
    # Time is what is under test: each attempt runs 0.7 s, longer than the 0.5 s window that gives the budget back.
    crash_late = "import time; time.sleep(0.7); raise SystemExit(1)"
    run = runs([task_spec("worker", 0, "h0", crash_late, chief=True)], max_restarts=1, restart_window=0.5)
    run.start("h0")
    wait_for(lambda: run.state("worker", 0).get("restarts", 0) >= 3, 20, "three restarts")
    assert not run.state("worker", 0)["final"]  # 3 restarts with max_restarts = 1: each ran 0.7 s > window
    quick = runs([task_spec("worker", 0, "h0", "raise SystemExit(1)", chief=True)], max_restarts=1, restart_window=60)
    quick.start("h0")
    assert quick.wait_exit()["h0"] == 1
    assert quick.state("worker", 0)["restarts"] == 1 and quick.state("worker", 0)["final"]


def test_a_taken_port_fails_the_task_clearly(runs: Any) -> None:
    with socket.socket() as squatter:
        squatter.bind(("0.0.0.0", 0))
        squatter.listen(1)
        port = squatter.getsockname()[1]
        run = runs([task_spec("worker", 0, "h0", FOREVER, chief=True, port=port)])
        run.start("h0")
        assert run.wait_exit(timeout=30)["h0"] == 1
    st = run.state("worker", 0)
    assert st["final"] and st["error"] == f"port {port} is in use by another process on h0"
    assert st["restarts"] == 0
    assert f"port {port} is in use" in Path(run.layout("worker", 0).log_file("worker", 0)).read_text()


def test_peer_messages_of_another_run_or_unsigned_are_dropped() -> None:
    port = free_port_block(1)
    key = secrets.token_bytes(32)
    channel = PeerChannel("run-a", "h0", key, ("127.0.0.1", port), {})
    try:
        lines = [
            encode(key, {"run": "run-b", "from": "h1", "seq": 1, "kind": "final", "task": "ps-0", "code": 1}),
            b'{"run":"run-a","from":"h1","seq":2,"kind":"final","task":"ps-0","code":1}\t0000\n',
            encode(secrets.token_bytes(32), {"run": "run-a", "from": "h1", "seq": 3, "kind": "final"}),
            encode(key, {"run": "run-a", "from": "h1", "seq": 4, "kind": "final", "task": "ps-0", "code": 0}),
        ]
        with socket.create_connection(("127.0.0.1", port)) as sock:
            sock.sendall(b"".join(lines))
            sock.shutdown(socket.SHUT_WR)
            reply = sock.recv(4096).decode()
        assert reply == "ok 4\n"
        assert channel.inbox.get(timeout=2)["seq"] == 4
        assert channel.inbox.empty()
    finally:
        channel.close()


def _send(port: int, *lines: bytes) -> str:
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(b"".join(lines))
        sock.shutdown(socket.SHUT_WR)
        return sock.recv(4096).decode()


def test_a_replayed_message_does_nothing_to_a_restarted_supervisor(runs: Any) -> None:
    """Issue 21 point 8: h1's signed group restart, captured and sent again to h0's supervisor once it
    has been started again for the run, must not restart h0's group a second time; h1's next message
    (a higher number) still does."""
    run = runs([task_spec("worker", 0, "h0", FOREVER, chief=True), task_spec("worker", 1, "h1", FOREVER)],
               mode="multi-worker-mirrored")
    data = json.loads(Path(run.layouts["h0"].run_file).read_text())
    key, port = bytes.fromhex(data["channel_key"]), data["plan"]["hosts"][0]["control_port"]
    captured = encode(key, {"run": "r1", "from": "h1", "seq": 1, "kind": "group-restart", "epoch": 1,
                            "cause": "captured", "t": time.time()})
    run.start("h0")
    wait_for(lambda: run.state("worker", 0).get("state") == "running", 15, "worker-0 running")
    wait_for(lambda: _port_listens(port), 15, "h0's control port")
    assert _send(port, captured) == "ok 1\n"
    wait_for(lambda: run.supervisor("h0").get("epoch") == 1, 15, "h0's group restart 1")
    run.close()  # h0's supervisor stops ...
    run.procs.clear()
    run.start("h0")  # ... and is started again for the same run
    wait_for(lambda: _port_listens(port) and run.supervisor("h0").get("state") == "running", 15, "h0 again")
    assert _send(port, captured) == "ok 1\n"  # acknowledged (a retry looks the same), not acted on
    fresh = encode(key, {"run": "r1", "from": "h1", "seq": 2, "kind": "group-restart", "epoch": 2, "cause": "fresh",
                         "t": time.time()})
    assert _send(port, fresh) == "ok 2\n"
    wait_for(lambda: run.supervisor("h0").get("epoch") == 2, 15, "h0's group restart 2")
    log = Path(run.layout("worker", 0).log_file("worker", 0)).read_text()
    assert log.count("group restart 1:") == 1, log  # the replay restarted nothing
    assert log.count("group restart 2:") == 1, log


def _port_listens(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def test_a_restarted_sender_goes_on_numbering_so_its_news_is_not_dropped(tmp_path: Path) -> None:
    port = free_port_block(1)
    key = secrets.token_bytes(32)
    receiver = PeerChannel("r1", "h0", key, ("127.0.0.1", port), {}, marks_file=str(tmp_path / "h0.json"))
    try:
        for attempt in range(2):  # h1's supervisor, then h1's supervisor started again
            sender = PeerChannel("r1", "h1", key, None, {"h0": ("127.0.0.1", port)}, marks_file=str(tmp_path / "h1.json"))
            try:
                sender.broadcast("final", task="worker-1", code=0, stopped_by=None)
                assert sender.flush(10)
                message = receiver.inbox.get(timeout=5)
                assert (message["from"], message["seq"]) == ("h1", attempt + 1)
            finally:
                sender.close()
        assert json.loads((tmp_path / "h0.json").read_text())["seen"] == {"h1": 2}
    finally:
        receiver.close()


def test_a_run_file_without_a_key_opens_no_channel_and_says_so(runs: Any) -> None:
    """No fallback to an empty key: the host's tasks fail at once, with the reason, and nothing listens."""
    run = runs([task_spec("worker", 0, "h0", FOREVER, chief=True)])
    path = Path(run.layouts["h0"].run_file)
    data = json.loads(path.read_text())
    del data["channel_key"]
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match="without the run's key"):
        PeerChannel("r1", "h0", b"", None, {})
    run.start()
    assert run.wait_exit() == {"h0": 1}  # the run failed here
    st = run.state("worker", 0)
    assert st["final"] and st["restarts"] == 0 and "holds no valid peer channel key" in st["error"], st
    assert not _port_listens(data["plan"]["hosts"][0]["control_port"])


def test_policy_rules() -> None:
    budget = RestartBudget(2, window=10.0)
    assert budget.take() and budget.take() and not budget.take()
    budget.ran_for(11.0)
    assert budget.left == 2
    plan = {"mode": "between-graph", "training": {"success": "chief"},
            "tasks": [{"job": "ps", "index": 0}, {"job": "worker", "index": 0, "is_chief": True},
                      {"job": "worker", "index": 1}]}
    assert waited_for(plan) == {"worker-0"}
    assert outcome(plan, {"worker-1": {"code": 0, "stopped_by": None}}) is None
    assert outcome(plan, {"worker-0": {"code": 0, "stopped_by": None}}) == "finished"
    assert outcome(plan, {"worker-1": {"code": 2, "stopped_by": None}}) == "failed"
    assert outcome(plan, {"worker-0": {"code": -15, "stopped_by": "user"}}) == "stopped"
    plan["training"] = {"success": "all-workers"}
    assert waited_for(plan) == {"worker-0", "worker-1"}
    plan["mode"] = "parameter-server-strategy"  # only the coordinator trains
    plan["tasks"].append({"job": "chief", "index": 0, "is_chief": True})
    plan["tasks"][1]["is_chief"] = False
    assert waited_for(plan) == {"chief-0"}


HELD = {"code": None, "stopped_by": "user"}
OK = {"code": 0, "stopped_by": None}


def _plan(mode: str, success: str = "chief") -> dict[str, Any]:
    tasks = [{"job": "worker", "index": 0, "is_chief": True}, {"job": "worker", "index": 1}]
    return {"mode": mode, "training": {"success": success},
            "tasks": tasks + ([] if mode == "multi-worker-mirrored" else [{"job": "ps", "index": 0}])}


def test_stop_for_good_ends_the_run_stopped_only_when_it_cannot_go_on() -> None:
    """Issue 21 point 7: what the README promises of `x`, rule by rule (policy.py)."""
    between = _plan("between-graph")
    assert needed_for_the_run(between) == {"ps-0", "worker-0"}
    assert outcome(between, {"worker-1": HELD}) is None  # the run goes on without it ...
    assert outcome(between, {"worker-1": HELD, "worker-0": OK}) == "finished"  # ... and finishes
    assert outcome(between, {"worker-0": HELD}) == "stopped"  # the chief it waits for: stopped at once
    assert outcome(between, {"ps-0": HELD}) == "stopped"  # the variables' home: nothing can step
    every = _plan("between-graph", "all-workers")
    assert outcome(every, {"worker-1": HELD}) is None
    assert outcome(every, {"worker-1": HELD, "worker-0": OK}) == "finished"  # another worker finished it
    assert outcome(every, {"worker-1": HELD, "worker-0": HELD}) == "stopped"  # none left to finish it
    for mode in ("in-graph", "multi-worker-mirrored"):
        assert outcome(_plan(mode), {"worker-1": HELD}) == "stopped", mode  # in every step
    assert outcome(_plan("parameter-server-strategy"), {"worker-1": HELD}) is None  # its steps go elsewhere
