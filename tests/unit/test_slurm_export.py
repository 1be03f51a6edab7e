"""`tfcluster export slurm` and `tfcluster plan` of a [slurm] file through the real entry point, and the
exported script's text: the #SBATCH lines, every value inert for /bin/sh (a real sh reads the script's
assignments back), the rank program's pieces that need no Slurm (placeholders, GPU ids, hostfile order)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.config.schema import Config
from orchestrator.config.validate import validate
from orchestrator.plan import slurm_rank
from orchestrator.plan.sbatch import export_script, sbatch_header
from orchestrator.plan.slurm import plan_slurm

REPO = Path(__file__).resolve().parents[2]
HOSTS = """\
[cluster]
name = "demo"
[slurm]
nodes = 2
workers = 3
partition = "gpu,debug"
time = "2-00:00:00"
gpus_per_node = 4
mem = "64G"
sbatch_args = ["--constraint", "a100", "--exclusive"]
"""


def tfcluster(*args: str, home: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tfcluster", *args], check=False, cwd=REPO, capture_output=True,
                          text=True, timeout=60, env={"PATH": "/usr/bin:/bin", "HOME": str(home), "NO_COLOR": "1"})


def test_plan_shows_each_node_index_and_the_sbatch_lines(tmp_path: Path) -> None:
    (tmp_path / "hosts.toml").write_text(HOSTS)
    res = tfcluster("plan", str(tmp_path / "hosts.toml"), home=tmp_path)
    assert res.returncode == 0, res.stderr
    rows = [line.split("│")[1:4] for line in res.stdout.splitlines() if line.startswith("│ ") and "ps:0" in line]
    assert [c.strip() for c in rows[0]] == ["0", "0-1", "ps:0 worker:0"]
    for line in ("#SBATCH --nodes=2", "#SBATCH --ntasks-per-node=2", "#SBATCH --partition=gpu,debug",
                 "#SBATCH --gpus-per-node=4", "#SBATCH --constraint a100", "#SBATCH --exclusive"):
        assert line in res.stdout.splitlines(), line
    data = json.loads(tfcluster("plan", "--json", str(tmp_path / "hosts.toml"), home=tmp_path).stdout)
    assert [n["tasks"] for n in data["slurm"]["nodes"]] == [["ps:0", "worker:0"], ["worker:1", "worker:2"]]
    assert data["slurm"]["gpus_per_task"] == 2 and data["slurm"]["allocated"] is False
    assert data["cluster_spec"]["worker"][2].startswith("<node-1-addr>:")


def test_export_prints_a_script_sh_can_read(tmp_path: Path) -> None:
    (tmp_path / "hosts.toml").write_text(HOSTS)
    res = tfcluster("export", "slurm", str(tmp_path / "hosts.toml"), home=tmp_path)
    assert res.returncode == 0 and res.stderr == ""
    assert res.stdout.startswith("#!/bin/sh\n#SBATCH --job-name=demo\n#SBATCH --nodes=2\n")
    assert subprocess.run(["sh", "-n"], input=res.stdout, text=True, check=False).returncode == 0
    assert "srun --ntasks=4 --distribution=arbitrary --kill-on-bad-exit=1" in res.stdout


@pytest.mark.parametrize(("text", "fragment"), [
    ('[[hosts]]\nname = "a"\naddress = "10.0.0.1"\nroles = ["ps", "worker"]\n', "slurm: no [slurm] section"),
    (HOSTS.replace('time = "2-00:00:00"', 'time = "2 days"'), "slurm.time: `2 days` is not a Slurm time limit"),
])
def test_export_of_bad_input_is_one_line_exit_2_and_no_script(tmp_path: Path, text: str, fragment: str) -> None:
    (tmp_path / "hosts.toml").write_text(text)
    res = tfcluster("export", "slurm", str(tmp_path / "hosts.toml"), home=tmp_path)
    assert res.returncode == 2 and res.stdout == ""
    assert len(res.stderr.strip().splitlines()) == 1 and fragment in res.stderr, res.stderr


def test_check_of_a_slurm_job_is_refused_and_start_says_why_slurm_refused(tmp_path: Path) -> None:
    (tmp_path / "hosts.toml").write_text(HOSTS)
    res = tfcluster("check", str(tmp_path / "hosts.toml"), home=tmp_path)
    assert res.returncode == 2 and "slurm: `check` does not probe a [slurm] job's nodes" in res.stderr
    assert not (tmp_path / ".local").exists()  # no run record
    # Here no Slurm answers (no SLURM_CONF): sbatch's own words, one line, exit 2, and a record that says so.
    res = tfcluster("start", str(tmp_path / "hosts.toml"), home=tmp_path)
    assert res.returncode == 2 and "sbatch refused the job: sbatch: " in res.stderr, res.stderr
    assert len(res.stderr.strip().splitlines()) == 1, res.stderr
    record = json.loads(next((tmp_path / ".local" / "state" / "tfcluster" / "runs").glob("*.json")).read_text())
    assert record["status"] == "failed-to-start" and "slurm" not in record


def test_values_reach_the_script_inert(tmp_path: Path) -> None:
    """A hostile cluster name and python path, env values with quotes and $(...): sh reads back the exact
    python path; the name on the #SBATCH line is reduced; the env travels compressed, never as shell text."""
    python = "/opt/my env/py'thon$(touch pwned)"
    config = Config.model_validate({
        "cluster": {"name": "x\n#SBATCH --uid=0\nrm -rf ~"}, "remote": {"python": python},
        "slurm": {"nodes": 1, "workers": 1},
        "training": {"env": {"NOTE": "it's $(touch pwned) `id`"}},
    })
    job = plan_slurm(validate(config))
    script = export_script(job, "hosts.toml")
    assert sbatch_header(job)[0] == "#SBATCH --job-name=x-SBATCH---uid-0-rm--rf"
    assert [line for line in script.splitlines() if line.startswith("#SBATCH")] == sbatch_header(job)
    head = script[: script.index("export TFCLUSTER_SLURM_PLAN")]
    read = subprocess.run(["sh", "-c", head + 'printf %s "$TFCLUSTER_PYTHON"\n'], cwd=tmp_path, capture_output=True,
                          text=True, check=True)
    assert read.stdout == python and not (tmp_path / "pwned").exists()
    encoded = head.split("TFCLUSTER_SLURM_PLAN=", 1)[1].split("\n", 1)[0]
    plan = slurm_rank.decode_job(encoded.strip("'"))["plan"]
    assert plan["tasks"][1]["env"]["NOTE"] == "it's $(touch pwned) `id`"


def test_placeholders_become_the_nodes_names_and_addresses() -> None:
    nodes = [("gpu-a", "10.0.0.1"), ("gpu-b", "10.0.0.2")]
    assert slurm_rank.substitute('["<node-1-addr>:23001", "<node-0>", "<node-10>x"]', nodes + [("c", "d")] * 9) == \
        '["10.0.0.2:23001", "gpu-a", "cx"]'
    with pytest.raises(slurm_rank.RankError, match="the plan names node 2, the allocation has 2 nodes"):
        slurm_rank.substitute("<node-2>", nodes)


@pytest.mark.parametrize(("planned", "from_slurm", "expected"), [
    ("", "0,1", ""), ("0,1", None, "0,1"), ("2,3", "4,5,6,7", "6,7"), ("1", "NoDevFiles", "1"),
])
def test_planned_gpus_map_through_what_slurm_gave_the_step(planned: str, from_slurm: str | None,
                                                           expected: str) -> None:
    assert slurm_rank.visible_gpus(planned, from_slurm) == expected


def test_more_gpus_planned_than_slurm_gave_is_one_line() -> None:
    with pytest.raises(slurm_rank.RankError, match="gives this task GPU 2, Slurm gave the step 2"):
        slurm_rank.visible_gpus("2", "0,1")


def test_node_addresses_and_the_hostfile_order() -> None:
    out = ("NodeName=n1 Arch=x86_64 NodeAddr=127.0.0.11 NodeHostName=vm OS=Linux 6.1 #1 SMP\n"
           "NodeName=n2 NodeAddr=127.0.0.12 NodeHostName=vm\n")
    assert slurm_rank.parse_node_addresses(out) == {"n1": "127.0.0.11", "n2": "127.0.0.12"}
    job = plan_slurm(validate(Config.model_validate({"slurm": {"nodes": 2, "workers": 2}})))  # ps, w0 | w1
    environ = {**os.environ, slurm_rank.PLAN_ENV: slurm_rank.encode_job(
        {"plan": job.plan.to_json(compact=True), "tasks_per_node": list(job.tasks_per_node), "run_name": "t"}),
        slurm_rank.NODES_ENV: "n1 127.0.0.11\nn2 127.0.0.12\n"}
    res = subprocess.run([sys.executable, "-c", Path(slurm_rank.__file__).read_text(), "hostfile"], env=environ,
                         capture_output=True, text=True, check=False)
    assert (res.returncode, res.stdout) == (0, "n1\nn1\nn2\n")
    wrong = subprocess.run([sys.executable, "-c", Path(slurm_rank.__file__).read_text(), "run"],
                           env={**environ, "SLURM_PROCID": "2", "SLURMD_NODENAME": "n1"},
                           capture_output=True, text=True, check=False)
    assert wrong.returncode == 2
    assert wrong.stderr == ("tfcluster rank 2: rank 2 runs on node n1, the plan puts it on n2: run the script with "
                            "sbatch as exported (its srun places every rank)\n")


def test_a_rank_never_signals_the_group_of_a_task_it_has_reaped(monkeypatch: pytest.MonkeyPatch) -> None:
    """Once the rank has reaped its task, the task's pid (its group's id) may be any new group's: a signal
    the rank gets from then on (the step's, at the job's end) goes to nobody. A real child process; the
    group signal is recorded, because pid reuse cannot be arranged on demand."""
    sent: list[tuple[int, int]] = []
    monkeypatch.setattr(slurm_rank.os, "killpg", lambda pgid, sig: sent.append((pgid, sig)))
    monkeypatch.setattr(slurm_rank, "children", [])
    monkeypatch.setattr(slurm_rank, "signalled", [])
    child = subprocess.Popen(["true"], start_new_session=True)
    slurm_rank.children.append(child)
    plan = {"mode": "between-graph", "training": {}}
    assert slurm_rank._follow(child, plan, {"job": "worker", "index": 1}, "worker:1", {}) == 0
    slurm_rank.forward(signal.SIGTERM, None)
    assert sent == [] and slurm_rank.signalled == [signal.SIGTERM]


def test_a_rank_whose_task_finished_outlives_the_steps_end_signal() -> None:
    """A worker that finishes by itself as the chief does: its rank returns 0, and the step's SIGUSR1 (the
    chief's rank ends the run with it) must not kill the rank while it exits, or srun's --kill-on-bad-exit
    fails the job (a fresh-clone run's export job ended FAILED so: "n3: task 2: User defined signal 1").
    A real child and a real signal to this process; the handlers are put back after."""
    saved = {sig: signal.getsignal(sig) for sig in slurm_rank.ENDING_SIGNALS}
    try:
        for sig in slurm_rank.ENDING_SIGNALS:
            signal.signal(sig, slurm_rank.forward)  # as `run` installs them
        child = subprocess.Popen(["true"], start_new_session=True)
        slurm_rank.children[:] = [child]
        slurm_rank.signalled.clear()
        plan = {"mode": "between-graph", "training": {}}
        assert slurm_rank._follow(child, plan, {"job": "worker", "index": 1}, "worker:1", {}) == 0
        assert all(signal.getsignal(sig) == signal.SIG_IGN for sig in slurm_rank.ENDING_SIGNALS)
        os.kill(os.getpid(), slurm_rank.END_SIGNAL)  # ignored: this process lives on
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)
        slurm_rank.signalled.clear()
