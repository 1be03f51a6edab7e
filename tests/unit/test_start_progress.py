"""`start`'s progress display: a row per host for a few hosts, a row per phase (hosts counted in their
latest stage) for many."""

from __future__ import annotations

import io

from rich.console import Console

from tfcluster.start_progress import ROWS_PER_HOST_UP_TO, StartProgress


def test_a_few_hosts_get_a_row_each() -> None:
    with StartProgress(Console(file=io.StringIO()), 2) as progress:
        for host in ("m0", "m1"):
            progress.report(host, "connect", 0, 1)
        progress.report("m0", "wait", 1, 2)
    assert {t.fields["host"]: (t.description, t.completed) for t in progress.progress.tasks} == {
        "m0": ("wait", 1), "m1": ("connect", 0)}


def test_many_hosts_are_counted_per_phase() -> None:
    hosts = ROWS_PER_HOST_UP_TO * 10
    out = io.StringIO()
    with StartProgress(Console(file=out, width=120), hosts) as progress:
        for i in range(hosts):
            progress.report(f"h{i}", "connect", 0, 1)
            progress.report(f"h{i}", "prepare", 0, 1)
            progress.report(f"h{i}", "ship", 0, 0)
        for i in range(hosts - 3):
            progress.report(f"h{i}", "launch", 0, 1)
            progress.report(f"h{i}", "wait", 1, 2)
            progress.report(f"h{i}", "running", 2, 2)
        progress.report(f"h{hosts - 1}", "failed", 0, 1)
    counts = {t.description: t.completed for t in progress.progress.tasks}
    assert counts == {"connecting": 0, "preparing": 2, "launching": 0, "running": hosts - 3, "failed": 1}
    assert len(progress.progress.tasks) == 5
    assert f"{hosts} hosts" in out.getvalue()
