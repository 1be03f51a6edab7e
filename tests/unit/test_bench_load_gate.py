"""benchmarks/common.py: a benchmark waits for a quiet machine and is REFUSED on a loaded one, never
silently reported. The load average is set by the test (a loaded or quiet machine cannot be made on
demand here); the waiting, the refusal and what is recorded are the real code's."""

from __future__ import annotations

import pytest

from benchmarks import common


def loads(values: list[float]) -> object:
    it = iter(values)
    last = [values[-1]]

    def getloadavg() -> tuple[float, float, float]:
        last[0] = next(it, last[0])
        return (last[0], last[0], last[0])

    return getloadavg


def test_a_loaded_machine_is_refused_after_the_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(common.os, "getloadavg", loads([9.0]))
    monkeypatch.setattr(common, "cores", lambda: 2)
    said: list[str] = []
    with pytest.raises(common.MachineBusy, match=r"REFUSED bench_x: load average 9.0 > 2 cores"):
        common.require_quiet("bench_x", max_wait_s=0.05, poll_s=0.01, say=lambda text, **_: said.append(text))
    assert said and "waiting for a quiet machine before bench_x" in said[0]


def test_it_waits_for_a_quiet_moment_and_records_the_load(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(common.os, "getloadavg", loads([5.0, 3.0, 1.5]))
    monkeypatch.setattr(common, "cores", lambda: 2)
    check = common.require_quiet("bench_y", max_wait_s=5, poll_s=0.01, say=lambda *a, **k: None)
    assert check["load_before"] == [1.5, 1.5, 1.5] and check["cpus"] == 2
    record = common.load_record()
    assert record["load_before"] == [1.5, 1.5, 1.5] and record["checked"] == "waited for a quiet moment"


def test_publish_refuses_to_write_after_a_loaded_start(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(common, "_last_check", None)
    monkeypatch.setattr(common, "_LOAD_AT_IMPORT", (4.0, 4.0, 4.0))
    monkeypatch.setattr(common, "cores", lambda: 2)
    written: list[str] = []
    monkeypatch.setattr(common, "write_results", lambda name, *a, **k: written.append(name))
    with pytest.raises(common.MachineBusy, match=r"REFUSED to write x: the load before was \[4.0, 4.0, 4.0\]"):
        common.publish("x", {}, "# x\n")
    assert written == []
