"""`tfcluster plan` through the real entry point (python -m tfcluster): table, --json, and bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "hosts.example.toml"


def tfcluster(*args: str, home: Path) -> subprocess.CompletedProcess[str]:
    # HOME is a fresh directory: load_config honours ~/.ssh/config and must not read the developer's.
    return subprocess.run(
        [sys.executable, "-m", "tfcluster", *args], check=False, cwd=REPO, capture_output=True, text=True, timeout=60,
        env={"PATH": "/usr/bin:/bin", "HOME": str(home), "COLUMNS": "80", "NO_COLOR": "1"},
    )


def test_plan_prints_a_table_grouped_by_host(tmp_path: Path) -> None:
    result = tfcluster("plan", str(EXAMPLE), home=tmp_path)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "cluster demo" in out and "mode between-graph" in out and "7 tasks on 5 hosts" in out
    for fragment in ("chief:0", "ps:1", "worker:3", "/job:worker/task:3/device:GPU:0", "gpu-b.internal", "23006"):
        assert fragment in out
    # grouped by host: gpu-b's two workers come right after its own row
    lines = [line for line in out.splitlines() if "worker:" in line]
    assert "gpu-a" in lines[0] and "gpu-a" not in lines[1] and "gpu-b" in lines[2]
    assert "PS load estimate (mlp" in out and "10 steps/s each, an assumption" in out
    assert result.stderr == ""


def test_plan_json_is_the_plan_plus_the_estimate_and_nothing_else(tmp_path: Path) -> None:
    result = tfcluster("plan", "--json", "--steps-per-sec", "2.5", str(EXAMPLE), home=tmp_path)
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["cluster_name"] == "demo"
    assert sorted(data["cluster_spec"]) == ["chief", "ps", "worker"]
    assert len(data["tasks"]) == 7
    estimate = data["ps_load_estimate"]
    assert estimate["steps_per_sec"] == 2.5 and estimate["trainers"] == 5
    assert [p["task"] for p in estimate["per_ps"]] == ["ps:0", "ps:1"]
    assert all(p["bytes_per_sec"] == p["variable_bytes"] * 2 * 5 * 2.5 for p in estimate["per_ps"])


def test_bad_file_is_one_line_on_stderr_exit_2(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text(EXAMPLE.read_text().replace("gpus = [0, 1]", "gpu = [0, 1]", 1))
    result = tfcluster("plan", str(bad), home=tmp_path)
    assert result.returncode == 2
    assert result.stdout == ""
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith(f"error: {bad}:")
    assert "hosts[3].gpu: unknown key `gpu` (did you mean `gpus`?)" in lines[0]


def test_missing_file_is_one_line_exit_2(tmp_path: Path) -> None:
    result = tfcluster("plan", str(tmp_path / "nope.toml"), home=tmp_path)
    assert result.returncode == 2
    assert result.stderr.strip() == f"error: {tmp_path}/nope.toml: file not found (copy hosts.example.toml to start one)"


def test_syntax_error_in_json_mode_is_still_one_line_and_no_json(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("[cluster\n")
    result = tfcluster("plan", "--json", str(bad), home=tmp_path)
    assert result.returncode == 2 and result.stdout == ""
    assert len(result.stderr.strip().splitlines()) == 1 and "TOML syntax error" in result.stderr


def test_plan_warns_about_an_ssh_config_alias_in_the_cluster_spec(tmp_path: Path) -> None:
    (tmp_path / ".ssh").mkdir()
    (tmp_path / ".ssh" / "config").write_text("Host gpu-b.internal\n  HostName 10.0.0.12\n  Port 2222\n")
    result = tfcluster("plan", str(EXAMPLE), home=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "warning: host gpu-b: `gpu-b.internal` is an ssh config alias for 10.0.0.12" in result.stdout
    as_json = json.loads(tfcluster("plan", "--json", str(EXAMPLE), home=tmp_path).stdout)
    assert any("alias for 10.0.0.12" in w for w in as_json["warnings"])


def test_an_address_that_looks_like_rich_markup_is_printed_as_written(tmp_path: Path) -> None:
    hosts = tmp_path / "hosts.toml"
    hosts.write_text('[[hosts]]\nname = "a"\naddress = "[/]"\nroles = ["ps", "worker"]\n')
    res = tfcluster("plan", str(hosts), home=tmp_path)
    assert res.returncode == 0, res.stderr
    assert "[/]" in res.stdout and "Traceback" not in res.stderr


MIRRORED_4_GPUS = """\
[cluster]
mode = "multi-worker-mirrored"

[[hosts]]
name = "big"
address = "10.0.0.11"
roles = ["worker"]
gpus = [0, 1, 2, 3]

[[hosts]]
name = "big2"
address = "10.0.0.12"
roles = ["worker"]
gpus = [0, 1, 2, 3]
"""


def test_a_4_gpu_host_in_multi_worker_mirrored_mode_is_one_worker_seeing_all_four(tmp_path: Path) -> None:
    hosts = tmp_path / "hosts.toml"
    hosts.write_text(MIRRORED_4_GPUS)
    result = tfcluster("plan", "--json", str(hosts), home=tmp_path)
    assert result.returncode == 0, result.stderr
    tasks = json.loads(result.stdout)["tasks"]
    assert [(t["job"], t["host"], t["gpus"], t["env"]["CUDA_VISIBLE_DEVICES"], t["device"]) for t in tasks] == [
        ("worker", "big", [0, 1, 2, 3], "0,1,2,3", "/job:worker/task:0/device:GPU:0"),
        ("worker", "big2", [0, 1, 2, 3], "0,1,2,3", "/job:worker/task:1/device:GPU:0")]
    table = tfcluster("plan", str(hosts), home=tmp_path)
    assert table.returncode == 0, table.stderr
    rows = [line for line in table.stdout.splitlines() if "worker:" in line]
    assert "/job:worker/task:0/device:GPU:0-3" in rows[0] and "0,1,2,3" in rows[0]


def test_gpus_per_task_that_does_not_divide_is_one_line_exit_2(tmp_path: Path) -> None:
    hosts = tmp_path / "hosts.toml"
    hosts.write_text(MIRRORED_4_GPUS.replace("gpus = [0, 1, 2, 3]\n", "gpus = [0, 1, 2, 3]\ngpus_per_task = 3\n", 1))
    result = tfcluster("plan", str(hosts), home=tmp_path)
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == (f"error: {hosts}:9: hosts[0].gpus_per_task: gpus_per_task = 3 does not divide the 4 "
                             "GPUs `big` lists (gpus = [0, 1, 2, 3]): use one of 1, 2, 4\n")
