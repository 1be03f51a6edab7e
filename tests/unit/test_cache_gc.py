"""Issue 33 item 8: the content cache's cleaner (training/run/cache_gc.py) on caches the real launcher built
(tests/helpers/local_start.py: the start conversation over a local transport, held at the barrier), and
against a real process holding the cache the way a start does."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.local_start import file_sets, prepared
from training.run import cache_gc
from training.run.content_cache import CACHED_MTIME, USES_FILE, Busy, Scratch, build, publish

REPO = Path(__file__).resolve().parents[2]
HOLDER = """\
import sys
sys.path.insert(0, sys.argv[2])
from training.run.content_cache import cache_lock
with cache_lock(sys.argv[1], exclusive=False, wait=5):
    print("held", flush=True)
    sys.stdin.read()
"""


def _blobs(cache: Path) -> set[str]:
    return {p.name for p in cache.iterdir() if len(p.name) == 64}


def test_the_cleaner_keeps_what_a_run_dir_names_and_frees_the_rest(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    for name in ("common.txt", "a.txt", "b.txt"):
        (src / name).write_text(f"{name}\n")
    sha = {name: hashlib.sha256(f"{name}\n".encode()).hexdigest() for name in ("common.txt", "a.txt", "b.txt")}
    workdir = tmp_path / "work"
    cache = workdir / "cache"
    with prepared(workdir, file_sets(src, ["common.txt", "a.txt"]), "ra"), \
            prepared(workdir, file_sets(src, ["common.txt", "b.txt"]), "rb"):
        assert set(sha.values()) <= _blobs(cache)
        shutil.rmtree(workdir / "runs" / "ra")  # what `stop --purge` does to run A's dir
        freed = cache_gc.clean(str(workdir))
        assert (freed.files, freed.bytes) == (1, len("a.txt\n"))  # A's tree linked it: one file's space
        assert sha["a.txt"] not in _blobs(cache) and {sha["common.txt"], sha["b.txt"]} <= _blobs(cache)
        assert len(list((cache / "trees").iterdir())) == 1
        assert (workdir / "runs/rb/local/code/common.txt").read_text() == "common.txt\n"
    freed = cache_gc.clean(str(workdir))  # no run dir left: nothing is kept
    assert _blobs(cache) == set() and list((cache / "trees").iterdir()) == []


def test_the_cleaner_removes_nothing_while_a_start_holds_the_cache(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = tmp_path / "cache"
    cache.mkdir()
    blob = cache / hashlib.sha256(b"x").hexdigest()
    blob.write_bytes(b"x")
    monkeypatch.setattr(cache_gc, "LOCK_WAIT_S", 0.2)  # how long it waits for the start: not the point here
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(cache), str(REPO)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    assert holder.stdin is not None and holder.stdout is not None
    try:
        assert holder.stdout.readline() == "held\n"
        with pytest.raises(Busy):
            cache_gc.clean(str(tmp_path))
        assert blob.read_bytes() == b"x"
    finally:
        holder.stdin.close()
        holder.wait(timeout=30)
        holder.stdout.close()
    assert cache_gc.clean(str(tmp_path)).files == 1 and not blob.exists()


def test_a_blob_published_twice_keeps_the_first_file_the_trees_link(tmp_path: Path) -> None:
    """Two hosts sharing a workdir both found a file missing and both shipped it (stress round of 2026-12-07:
    the cleaner then freed the package's cached names while a run still used it). The second publish keeps
    the first's file, so a tree built from it links the name the cache holds, and the cleaner keeps it."""
    cache = tmp_path / "work" / "cache"
    cache.mkdir(parents=True)
    data = b"shipped by two hosts\n"
    sha = hashlib.sha256(data).hexdigest()
    scratch = Scratch(str(cache))
    try:
        for host in ("m0", "m1"):
            tmp = scratch.name()
            Path(tmp).write_bytes(data)
            os.utime(tmp, (CACHED_MTIME, CACHED_MTIME))
            publish(tmp, str(cache / sha), scratch)
            if host == "m0":  # m0 builds the tree from its file before m1's arrives
                build(str(cache), str(cache / "trees" / "t1"), [["data.txt", sha, 0o600]], scratch, False)
    finally:
        scratch.close()
    assert os.stat(cache / sha).st_ino == os.stat(cache / "trees" / "t1" / "data.txt").st_ino
    assert not [p for p in cache.iterdir() if p.name.startswith(".tmp-")]
    run_dir = tmp_path / "work" / "runs" / "r1" / "m0"
    run_dir.mkdir(parents=True)
    (run_dir / USES_FILE).write_text(json.dumps({"tree": "t1"}))
    cache_gc.clean(str(tmp_path / "work"))
    assert _blobs(cache) == {sha}
