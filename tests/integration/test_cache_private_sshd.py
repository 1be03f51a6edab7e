"""Issue 33 items 5 and 8 over real sshd, the loopback machines sharing ONE workdir as an NFS home does:
each host's `code/` is its own (a task rewriting a synced file in place changes nothing another host's
tasks read, nor the cache), and `stop --purge` cleans the shared content cache of what no run left there
uses, never of what a live run uses."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from testkit.sshd import Machines
from tests.integration.lifecycle_helpers import cli, run_processes, unique_run_id

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

SHIPPED = "SHIPPED!!"  # as long as REWRITTEN: the rewrite is one write over the same bytes

# worker-0 (host m0) rewrites data.txt in place, then says so with a marker file; worker-1 (host m1) waits
# for the marker and reads data.txt. One program, two hosts: the marker path is its argument.
PROGRAM = """\
import os, sys, time
task, marker = os.environ["TFCLUSTER_TASK_ID"].split("#")[0], sys.argv[1]
if task == "worker-0":
    with open("data.txt", "r+") as f:
        f.write("REWRITTEN")
    open(marker, "w").close()
    print("WROTE", flush=True)
else:
    deadline = time.monotonic() + 60
    while not os.path.exists(marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    with open("data.txt") as f:
        print("READ " + f.read(), "after the marker" if os.path.exists(marker) else "NO MARKER", flush=True)
"""


def _cached_files(cache: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in cache.iterdir() if len(p.name) == 64 and p.is_file()}


def test_a_task_rewriting_a_synced_file_in_place_changes_nothing_another_host_reads(
        machines: Machines, tmp_path: Path, state_dir: Path) -> None:
    (tmp_path / "prog.py").write_text(PROGRAM)
    (tmp_path / "data.txt").write_text(SHIPPED)
    marker = tmp_path / "rewritten.marker"
    hosts = machines.hosts_toml(tmp_path / "hosts.toml", roles=[["worker"]] * 2, mode="multi-worker-mirrored",
                                training={"command": f"{{python}} prog.py {marker}", "sync": ["prog.py", "data.txt"],
                                          "success": "all-workers"})
    run_id = unique_run_id("private-code")
    res = cli(state_dir, "start", str(hosts), "--run", run_id, "--wait")
    assert res.returncode == 0, res.stderr
    logs = cli(state_dir, "logs", run_id).stdout
    assert "WROTE" in logs, logs
    assert f"READ {SHIPPED} after the marker" in logs, logs  # m1's own copy, whatever m0's task wrote
    workdir = Path(machines.workdir(0))
    code = [workdir / "runs" / run_id / host / "code" / "data.txt" for host in ("m0", "m1")]
    assert [p.read_text() for p in code] == ["REWRITTEN", SHIPPED]
    cache = workdir / "cache"
    cached = _cached_files(cache)
    assert hashlib.sha256(SHIPPED.encode()).hexdigest() in cached
    assert all(hashlib.sha256(data).hexdigest() == name for name, data in cached.items())  # as shipped
    trees = [p for p in (cache / "trees").glob("*/data.txt")]
    assert trees and all(p.read_text() == SHIPPED for p in trees)  # the next run starts from the shipped bytes
    assert cli(state_dir, "stop", run_id, "--purge").returncode == 0


def _names(cache: Path, sub: str) -> set[str]:
    return set(os.listdir(cache / sub)) if (cache / sub).is_dir() else set()


def test_purging_a_run_frees_what_only_it_used_and_purging_the_last_frees_the_cache(
        sshd_machines: Callable[..., Machines], tmp_path: Path, state_dir: Path) -> None:
    """Fresh machines: their workdir holds only these two runs. Both share common.txt (one cached file) and
    tfcluster's package; run A alone has a.txt, run B alone b.txt."""
    machines = sshd_machines(2)
    texts = {"common.txt": "shared by both runs\n", "a.txt": "only run A\n", "b.txt": "only run B\n"}
    for name, text in texts.items():
        (tmp_path / name).write_text(text)
    sha = {name: hashlib.sha256(text.encode()).hexdigest() for name, text in texts.items()}
    runs = {}
    for run, own in (("A", "a.txt"), ("B", "b.txt")):
        hosts = machines.hosts_toml(tmp_path / f"hosts-{run}.toml", roles=[["worker"]] * 2,
                                    mode="multi-worker-mirrored",
                                    training={"command": "sleep 600", "sync": ["common.txt", own]})
        runs[run] = unique_run_id(f"cache-{run}")
        res = cli(state_dir, "start", str(hosts), "--run", runs[run])
        assert res.returncode == 0, res.stderr
    cache = Path(machines.workdir(0)) / "cache"
    assert set(sha.values()) <= set(_cached_files(cache))
    assert len(_names(cache, "trees")) == 2 and len(_names(cache, "packages")) == 1

    assert cli(state_dir, "stop", runs["A"], "--purge").returncode == 0
    assert set(_cached_files(cache)) == {sha["common.txt"], sha["b.txt"]} | set(_package_files(cache))
    assert len(_names(cache, "trees")) == 1 and len(_names(cache, "packages")) == 1  # B's, still running
    b_code = Path(machines.workdir(0)) / "runs" / runs["B"] / "m1" / "code"
    assert (b_code / "common.txt").read_text() == texts["common.txt"]
    assert run_processes(runs["B"]), "run B still runs"

    assert cli(state_dir, "stop", runs["B"], "--purge").returncode == 0
    assert _cached_files(cache) == {}
    assert _names(cache, "trees") == set() and _names(cache, "packages") == set()
    assert [p.name for p in cache.iterdir() if p.name not in ("trees", "packages")] == [".lock"]


def _package_files(cache: Path) -> set[str]:
    """The cached files tfcluster's package links (hash of each file under packages/)."""
    return {hashlib.sha256(p.read_bytes()).hexdigest() for p in (cache / "packages").rglob("*")
            if p.is_file() and "__pycache__" not in p.parts}
