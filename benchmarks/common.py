"""What every benchmark shares: where its results go, how they are written, the machine they ran on, and
the load check that refuses to measure on a busy machine.

The machine is shared (other engineers run tests on its 2 cores), so a figure measured while it is
loaded is a figure of the load. `require_quiet()` waits until the 1-minute load average is at most the
core count and raises MachineBusy (the run is REFUSED, nothing is written) when that moment does not come
within the wait; `python -m benchmarks` calls it before every benchmark, and benchmarks that interleave
rounds call it before each round. `publish()` records the load before (the last check, or the load when
this module was first imported, i.e. before the benchmark started) and after, and refuses to write when
the load before was above the core count.
"""

from __future__ import annotations

import json
import os
import statistics
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, TypeVar

ROOT = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).resolve().parent / "results"

K = TypeVar("K")
MAX_WAIT_ENV = "TFCLUSTER_BENCH_MAX_WAIT_S"  # how long require_quiet waits for a quiet moment (default 1800)
_LOAD_AT_IMPORT = os.getloadavg()  # before any benchmark of this process ran
_last_check: dict[str, Any] | None = None


class MachineBusy(RuntimeError):
    """The load before a measurement was above the core count: the run is refused, nothing is written."""


def cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def load_now() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def require_quiet(what: str = "the benchmark", max_wait_s: float | None = None, poll_s: float = 20.0,
                  say: Any = print) -> dict[str, Any]:
    """Wait until the 1-minute load average is at most the core count, then return the check
    ({"cpus", "load_before", "waited_s"}); MachineBusy when it is still above after max_wait_s."""
    global _last_check
    limit = cores()
    wait = float(os.environ.get(MAX_WAIT_ENV, "1800")) if max_wait_s is None else max_wait_s
    started = time.monotonic()
    while True:
        load = load_now()
        if load[0] <= limit:
            _last_check = {"cpus": limit, "load_before": load, "waited_s": round(time.monotonic() - started, 1)}
            return _last_check
        waited = time.monotonic() - started
        if waited >= wait:
            raise MachineBusy(f"REFUSED {what}: load average {load[0]} > {limit} cores (1/5/15 min: {load}) "
                              f"after waiting {waited:.0f} s for a quiet moment")
        say(f"waiting for a quiet machine before {what}: load {load[0]} > {limit} cores ({waited:.0f} s so far)",
            flush=True)
        time.sleep(poll_s)


def load_record() -> dict[str, Any]:
    """The load before (the last check, else the load when the benchmark started) and now."""
    before = _last_check["load_before"] if _last_check else [round(x, 2) for x in _LOAD_AT_IMPORT]
    return {"cpus": cores(), "load_before": before, "load_after": load_now(),
            "checked": "waited for a quiet moment" if _last_check else "load when the benchmark started"}


def write_results(name: str, data: dict[str, Any], markdown: str, directory: Path = RESULTS) -> tuple[Path, Path]:
    """<directory>/<name>.json (the figures, for tools) and <name>.md (the same for people)."""
    directory.mkdir(parents=True, exist_ok=True)
    json_path, md_path = directory / f"{name}.json", directory / f"{name}.md"
    json_path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    md_path.write_text(markdown, encoding="utf-8")
    return json_path, md_path


def publish(name: str, data: dict[str, Any], markdown: str, *, show_json: bool = False) -> tuple[Path, Path]:
    """Write both result files with the machine's load before and after, then print the figures (as JSON or
    as the Markdown) and where they went. MachineBusy (nothing written) when the load before was above
    the core count."""
    load = load_record()
    if load["load_before"][0] > load["cpus"]:
        raise MachineBusy(f"REFUSED to write {name}: the load before was {load['load_before']} on {load['cpus']} "
                          "cores; run it through `python -m benchmarks` (waits for a quiet moment)")
    data = {**data, "machine_load": load}
    markdown = (markdown.rstrip("\n") + f"\n\nMachine load (1/5/15 min) on {load['cpus']} cores: before "
                f"{load['load_before']} ({load['checked']}), after {load['load_after']}.\n")
    json_path, md_path = write_results(name, data, markdown)
    print(json.dumps(data, indent=2) if show_json else markdown)
    print(f"wrote {json_path} and {md_path}")
    return json_path, md_path


def machine() -> dict[str, Any]:
    """CPUs and the 1-minute load average now: the machine is shared, so its load colours every figure."""
    return {"cpus": os.cpu_count(), "load_avg_1m_at_end": os.getloadavg()[0]}


def machine_line(cpus: int | None, load_avg_1m: float) -> str:
    """The closing Markdown line of a CPU-use benchmark."""
    return (f"\nMachine: {cpus} CPUs, load average (1 min) at the end "
            f"{load_avg_1m} (shared with other work: CPU figures are upper bounds).\n")


def footer(cpus: int | None, load_average: list[float], measured_at: str, python: str | None = None) -> str:
    """The closing Markdown line of a timing benchmark: the machine, its load, when."""
    py = f", Python {python}" if python else ""
    return (f"Machine: {cpus} CPUs{py}, load average at the end {', '.join(str(x) for x in load_average)}, "
            f"measured {measured_at}.")


def now_utc() -> str:
    import time

    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def median_or_none(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def medians(samples: Mapping[K, Iterable[float]]) -> dict[K, float]:
    """The median of each series, e.g. seconds per host count."""
    return {key: statistics.median(values) for key, values in samples.items()}


def busy_cpu_seconds() -> float:
    """Machine-wide CPU time spent busy, all cores (other processes on the machine included). On one
    machine playing N hosts, wall time cannot fall below busy CPU / cores, however parallel the fan-out."""
    import psutil

    t = psutil.cpu_times()
    return float(sum(getattr(t, k, 0.0) for k in ("user", "nice", "system", "irq", "softirq", "steal")))


def load_note(cpus: int | None, before: float, other_share: list[float]) -> str:
    """One honest sentence about the machine's load. The verdict comes from the share of all cores busy
    with OTHER work during the run (machine-wide busy CPU minus this benchmark's own processes): the load
    average during a run counts the benchmark's own hosts, and the one before it whatever just ran."""
    cores = cpus or 1
    worst = max(other_share) if other_share else 0.0
    verdict = ("the machine was LOADED by other work: wall times are inflated and noisier than on an idle "
               "machine" if worst > 0.25 else "other work left the machine mostly to this benchmark")
    return (f"Load average just before: {before:.2f} on {cores} cores (it counts whatever ran just before, "
            f"e.g. the previous benchmark); other work used up to {worst:.0%} of all cores during the run: "
            f"{verdict}.")
