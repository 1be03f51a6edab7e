"""`Board`: a run's event files followed from its hosts to a local TensorBoard, over the local transport
(two "hosts" on this machine, real sender processes, a real TensorBoard process queried over HTTP). New
points reach TensorBoard while it runs; the state file names the open board; closing it leaves no process.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from orchestrator.results.board import Board
from orchestrator.results.board_state import find_open, state_path
from orchestrator.run import records
from tests import requires
from tests.helpers.results import local_record, scalar_tags, scalars
from tests.helpers.waiting import wait_for
from training.run.layout import RunLayout
from training.telemetry.tfevents import EventFileWriter

requires.tensorboard()


@pytest.fixture
def record(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> records.RunRecord:
    monkeypatch.setenv("TFCLUSTER_STATE_DIR", str(tmp_path / "state"))
    return local_record(tmp_path, training={"logdir": "tb"})


@pytest.fixture
def writers(record: records.RunRecord) -> Iterator[dict[str, EventFileWriter]]:
    m0, m1 = (RunLayout(record.host(h).run_dir) for h in ("m0", "m1"))
    out = {"worker:0": EventFileWriter(m0.summaries_dir("worker", 0)),
           "worker:1": EventFileWriter(m1.summaries_dir("worker", 1)),
           "logdir/m0/train": EventFileWriter(str(Path(m0.code, "tb", "train")))}
    yield out
    for w in out.values():
        w.close()


def test_every_tasks_run_is_served_and_followed_and_nothing_is_left(
        record: records.RunRecord, writers: dict[str, EventFileWriter]) -> None:
    writers["worker:0"].add_scalars(10, [("loss", 2.0), ("steps_per_s", 5.0)])
    writers["worker:1"].add_scalars(12, [("loss", 1.5)])
    writers["logdir/m0/train"].add_scalars(1, [("accuracy", 0.25)])
    board = Board(record, interval=0.5).open()
    try:
        assert board.runs() == ["logdir/m0/train", "worker:0", "worker:1"]
        assert board.url.startswith("http://127.0.0.1:")
        opened = find_open(record.run_id)
        assert opened is not None and opened.url == board.url
        assert state_path(record.run_id).stat().st_mode & 0o777 == 0o600
        tags = wait_for(lambda: (t := scalar_tags(board.url)) and len(t) == 3 and t, 60, "three runs in TensorBoard")
        assert tags == {"worker:0": ["loss", "steps_per_s"], "worker:1": ["loss"], "logdir/m0/train": ["accuracy"]}
        assert scalars(board.url, "worker:0", "loss") == [(10, 2.0)]
        writers["worker:1"].add_scalars(20, [("loss", 0.5)])  # written on its host while the board is open
        wait_for(lambda: scalars(board.url, "worker:1", "loss") == [(12, 1.5), (20, 0.5)], 60, "the new point")
        server = psutil.Process(opened.server_pid)
    finally:
        board.close()
    assert not server.is_running() or server.status() == psutil.STATUS_ZOMBIE
    assert find_open(record.run_id) is None and not state_path(record.run_id).exists()


def test_purging_the_run_ends_its_board_and_its_local_copy(
        record: records.RunRecord, writers: dict[str, EventFileWriter]) -> None:
    writers["worker:0"].add_scalars(1, [("loss", 1.0)])
    board = Board(record, interval=0.5).open()
    try:
        records.remove(record.run_id)  # what `stop --purge` does here once every host is clean
        wait_for(lambda: not board.serving, 30, "the follower to notice")
        assert board.follower.gone
    finally:
        board.close()
    assert not records.local_dir(record.run_id).exists()
