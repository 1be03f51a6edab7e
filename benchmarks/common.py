"""What every benchmark shares: where its results go, how they are written, the machine they ran on."""

from __future__ import annotations

import json
import os
import statistics
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, TypeVar

ROOT = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).resolve().parent / "results"

K = TypeVar("K")


def write_results(name: str, data: dict[str, Any], markdown: str, directory: Path = RESULTS) -> tuple[Path, Path]:
    """<directory>/<name>.json (the figures, for tools) and <name>.md (the same for people)."""
    directory.mkdir(parents=True, exist_ok=True)
    json_path, md_path = directory / f"{name}.json", directory / f"{name}.md"
    json_path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    md_path.write_text(markdown, encoding="utf-8")
    return json_path, md_path


def publish(name: str, data: dict[str, Any], markdown: str, *, show_json: bool = False) -> tuple[Path, Path]:
    """Write both result files, then print the figures (as JSON or as the Markdown) and where they went."""
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
