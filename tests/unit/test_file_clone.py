"""Issue 33 item 5: a host's private copy of a cached file (training/run/file_clone.py), the cheapest way the
filesystem allows. The real copy runs on this machine's filesystem; whether it can reflink is asked of
`cp --reflink=always`, independently of the code under test. The choice between the ways is also tested at
the one seam that asks the filesystem for a clone (`file_clone.reflink`), replaced by a filesystem that
can: this machine's ext4 cannot, so only there is the reflink branch reachable."""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from training.run import file_clone
from training.run.content_cache import CACHED_MTIME


def _source(tmp_path: Path, data: bytes = b"shipped bytes\n" * 1000) -> Path:
    src = tmp_path / "cached"
    src.write_bytes(data)
    src.chmod(0o500)
    os.utime(src, (CACHED_MTIME, CACHED_MTIME))
    return src


def _fs_can_reflink(tmp_path: Path) -> bool:
    """The oracle: GNU cp asked for a clone on this filesystem."""
    (tmp_path / "probe-a").write_bytes(b"x")
    res = subprocess.run([shutil.which("cp") or "cp", "--reflink=always", str(tmp_path / "probe-a"),
                          str(tmp_path / "probe-b")], capture_output=True, check=False)
    return res.returncode == 0


def test_a_clone_is_a_private_copy_with_the_sources_bytes_mode_and_mtime(tmp_path: Path) -> None:
    src = _source(tmp_path)
    how = file_clone.clone_file(str(src), str(tmp_path / "copy"))
    assert how == ("reflink" if _fs_can_reflink(tmp_path) else "kernel")
    copy = tmp_path / "copy"
    assert copy.read_bytes() == src.read_bytes()
    assert (copy.stat().st_mode & 0o777, copy.stat().st_mtime_ns) == (0o500, CACHED_MTIME * 10**9)
    assert copy.stat().st_ino != src.stat().st_ino
    copy.chmod(0o600)
    with open(copy, "r+b") as f:  # a task rewriting its file in place
        f.write(b"REWRITTEN")
    assert src.read_bytes().startswith(b"shipped bytes")


def test_the_real_reflink_seam_says_no_where_the_filesystem_cannot_clone(tmp_path: Path) -> None:
    src = _source(tmp_path)
    with open(src, "rb") as s, open(tmp_path / "dst", "wb") as d:
        assert file_clone.reflink(s.fileno(), d.fileno()) is _fs_can_reflink(tmp_path)


def test_a_filesystem_that_clones_is_asked_first_and_nothing_is_copied(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The seam replaced: a filesystem that clones (it writes the bytes itself, as sharing the blocks would
    show them); neither the kernel copy nor the plain copy may run after it."""
    src = _source(tmp_path)

    def clones(src_fd: int, dst_fd: int) -> bool:
        os.write(dst_fd, os.pread(src_fd, 1 << 20, 0))
        return True

    def never(*_args: object) -> bool:
        raise AssertionError("copied although the filesystem cloned")

    monkeypatch.setattr(file_clone, "reflink", clones)
    monkeypatch.setattr(file_clone, "kernel_copy", never)
    monkeypatch.setattr(file_clone, "plain_copy", never)
    assert file_clone.clone_file(str(src), str(tmp_path / "copy")) == "reflink"
    assert (tmp_path / "copy").read_bytes() == src.read_bytes()


def test_a_kernel_copy_that_stops_half_way_is_finished_by_a_plain_copy(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """copy_file_range refused after a first part (EXDEV: an older kernel across filesystems): the plain
    copy goes on from where it stopped."""
    data = os.urandom(3 * file_clone.CHUNK + 17)
    src = _source(tmp_path, data)
    real = os.copy_file_range
    calls = []

    def refuses_after_one(src_fd: int, dst_fd: int, count: int) -> int:
        calls.append(count)
        if len(calls) > 1:
            raise OSError(errno.EXDEV, "cross-device")
        return real(src_fd, dst_fd, min(count, 12345))

    monkeypatch.setattr(file_clone, "reflink", lambda _s, _d: False)
    monkeypatch.setattr(os, "copy_file_range", refuses_after_one)
    assert file_clone.clone_file(str(src), str(tmp_path / "copy")) == "copy"
    assert (tmp_path / "copy").read_bytes() == data
