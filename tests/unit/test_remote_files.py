"""Copying a host's files here (orchestrator/results/remote_files.py + training/results/sender.py), over the
local transport: the real sender in a real `python -S -c`, real files on both sides. What is already here
with the same size and hash is not sent again; a cut copy or a grown file sends only what is missing."""

from __future__ import annotations

import hashlib
import os
import sys
import threading
from pathlib import Path

import pytest

from orchestrator.errors import HostError
from orchestrator.results.remote_files import PART, HostFiles, Root, safe_relative
from orchestrator.transport.local import LocalTransport
from tests.helpers.results import file_senders


def fetch(src: Path, dest: Path, *, verify: bool = True, match: str = "") -> tuple[HostFiles, object]:
    files = HostFiles(LocalTransport("m0"), sys.executable)
    return files, files.fetch([Root(str(src), dest, match)], verify=verify)


def tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture
def src(tmp_path: Path) -> Path:
    root = tmp_path / "remote" / "checkpoints"
    (root / "sub").mkdir(parents=True)
    (root / "checkpoint").write_text('model_checkpoint_path: "ckpt-2"\n')
    (root / "ckpt-2.data-00000-of-00001").write_bytes(os.urandom(300_000))
    (root / "ckpt-2.index").write_bytes(b"\x00index")
    (root / "sub" / "empty").write_bytes(b"")
    os.symlink(root / "ckpt-2.index", root / "link")  # not followed
    return root


def test_a_tree_arrives_whole_and_private_and_is_not_sent_twice(src: Path, tmp_path: Path) -> None:
    dest = tmp_path / "here"
    _, first = fetch(src, dest)
    expected = {k: v for k, v in tree(src).items() if k != "link"}
    assert tree(dest) == expected
    assert first.files == 4 and first.same == 0 and first.bytes == sum(map(len, expected.values()))  # type: ignore[attr-defined]
    assert all(p.stat().st_mode & 0o077 == 0 for p in [dest, *dest.rglob("*")])  # directories too
    _, again = fetch(src, dest)
    assert (again.files, again.same, again.bytes) == (0, 4, 0)  # type: ignore[attr-defined]


def test_a_cut_copy_and_a_grown_file_send_only_what_is_missing(src: Path, tmp_path: Path) -> None:
    dest = tmp_path / "here"
    fetch(src, dest)
    data = (src / "ckpt-2.data-00000-of-00001").read_bytes()
    (dest / "ckpt-2.data-00000-of-00001").unlink()
    (dest / f"ckpt-2.data-00000-of-00001{PART}").write_bytes(data[:100_000])  # a copy cut short
    with open(src / "checkpoint", "a") as f:
        f.write('all_model_checkpoint_paths: "ckpt-2"\n')  # grown since the last copy
    _, res = fetch(src, dest)
    assert tree(dest) == {k: v for k, v in tree(src).items() if k != "link"}
    assert res.files == 2 and res.bytes == 200_000 + len('all_model_checkpoint_paths: "ckpt-2"\n')  # type: ignore[attr-defined]


def test_a_changed_file_of_the_same_size_is_sent_again(src: Path, tmp_path: Path) -> None:
    dest = tmp_path / "here"
    fetch(src, dest)
    (src / "ckpt-2.index").write_bytes(b"\x01INDEX")
    _, res = fetch(src, dest)
    assert (dest / "ckpt-2.index").read_bytes() == b"\x01INDEX" and res.files == 1  # type: ignore[attr-defined]
    assert not list(dest.rglob(f"*{PART}"))


def test_following_appends_only_new_bytes_of_matching_files(tmp_path: Path) -> None:
    src, dest = tmp_path / "summaries", tmp_path / "tb"
    (src / "worker-0").mkdir(parents=True)
    events = src / "worker-0" / "events.out.tfevents.1.h.2.0"
    events.write_bytes(b"a" * 10)
    (src / "worker-0" / "notes.txt").write_text("not an event file")
    fetch(src, dest, verify=False, match="tfevents")
    with open(events, "ab") as f:
        f.write(b"b" * 5)
    _, res = fetch(src, dest, verify=False, match="tfevents")
    assert tree(dest) == {"worker-0/events.out.tfevents.1.h.2.0": b"a" * 10 + b"b" * 5}
    assert res.bytes == 5  # type: ignore[attr-defined]


def test_a_missing_directory_is_named_not_an_error(tmp_path: Path) -> None:
    _, res = fetch(tmp_path / "nope", tmp_path / "here")
    assert res.missing == [str(tmp_path / "nope")] and res.files == 0  # type: ignore[attr-defined]


@pytest.mark.parametrize("bad", ["/etc/passwd", "../x", "a/../../x", "", ".", f"a{PART}"])
def test_paths_that_would_leave_the_destination_are_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="refused path"):
        safe_relative(bad)


def test_cancel_ends_the_copy_and_the_sender_with_it(tmp_path: Path) -> None:
    src = tmp_path / "big"
    src.mkdir()
    (src / "blob").write_bytes(os.urandom(64 << 20))
    files = HostFiles(LocalTransport("m0"), sys.executable)
    outcome: list[object] = []

    def run() -> None:
        try:
            outcome.append(files.fetch([Root(str(src), tmp_path / "here")], verify=True))
        except HostError as exc:
            outcome.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    part = tmp_path / "here" / f"blob{PART}"
    deadline = 60.0
    while not (part.exists() and part.stat().st_size > 0) and deadline > 0 and thread.is_alive():
        threading.Event().wait(0.05)
        deadline -= 0.05
    files.cancel()
    thread.join(30)
    assert not thread.is_alive()
    assert isinstance(outcome[0], HostError) and outcome[0].reason == "cancelled", outcome
    assert not (tmp_path / "here" / "blob").exists()  # a cut copy is never taken for the file
    assert not file_senders()
    assert hashlib.sha256(part.read_bytes()).hexdigest() != hashlib.sha256((src / "blob").read_bytes()).hexdigest()
