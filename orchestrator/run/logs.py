"""`logs`: task logs prefixed `job:task@host`, read once or followed (`-f`) with reconnects.

Read once, every chosen log of a host comes from ONE `tail` over all of them (its `==> <path> <==`
headers say which lines are whose; `/dev/null` among the files makes it print them even for one
file), every host at once; following keeps one `tail -F` stream per task and reconnects with backoff
when a host goes away or the stream ends, until the caller's stop event is set or Ctrl-C. A reconnect
resumes at the line after the last one shown (`tail -n +N`: a follow knows the number of every line it
shows), so what was written while the host was away is shown too, and nothing twice. Each
reconnect opens a new transport through `opener`, so an opener that asks how the host is reached now
(a Slurm run's: through the job while it runs, its submit host after) follows the log across the job's end.
"""

from __future__ import annotations

import contextlib
import queue
import threading
import time
from collections.abc import Callable, Iterable

from orchestrator.errors import HostError, UsageError
from orchestrator.plan.model import TaskPlan
from orchestrator.run import records
from orchestrator.run.remote import RemoteRun, with_retry
from orchestrator.transport.base import LineStream, shell_command
from orchestrator.transport.factory import Opener, transport_for
from orchestrator.transport.fan_out import fan_out
from training.run.layout import RunLayout

# A follow that starts K lines back: its first line is the number of the first log line it shows, so that
# reconnects can resume by number. $1 the log, $2 K. (wc counts complete lines: a partial last one is shown.)
FOLLOW_FROM_LAST = ('n=$(wc -l 2>/dev/null <"$1") || n=0; s=$((n - $2 + 1)); [ "$s" -ge 1 ] || s=1; '
                    'echo "$s"; exec tail -n "+$s" -F "$1"')


def select_tasks(record: records.RunRecord, selectors: Iterable[str]) -> list[TaskPlan]:
    """`worker:1`, `worker-1`, `worker` (every worker), or `worker@m2`; none = every task."""
    tasks = list(record.plan.tasks)
    selectors = list(selectors)
    if not selectors:
        return tasks
    chosen: list[TaskPlan] = []
    for sel in selectors:
        spec, _, host = sel.partition("@")
        job, sep, index = spec.replace("-", ":").partition(":")
        matched = [t for t in tasks
                   if t.job == job and (not sep or str(t.index) == index) and (not host or t.host == host)]
        if not matched:
            known = ", ".join(t.name for t in tasks)
            raise UsageError(f"no task {sel!r} in run {record.run_id} (tasks: {known})")
        chosen.extend(t for t in matched if t not in chosen)
    return chosen


def _prefix(task: TaskPlan) -> str:
    return f"{task.name}@{task.host}"


def logs(record: records.RunRecord, selectors: Iterable[str], emit: Callable[[str], None], *,
         follow: bool = False, lines: int | None = None, timeout: float = 15.0,
         stop_event: threading.Event | None = None, opener: Opener = transport_for) -> None:
    """Emit every chosen task's log lines prefixed `job:task@host`; with follow, keep streaming
    (reconnecting with backoff) until stop_event is set or KeyboardInterrupt."""
    chosen = select_tasks(record, selectors)
    tail_from = "+1" if lines is None else str(lines)

    if follow:
        _follow(record, chosen, emit, tail_from, stop_event or threading.Event(), opener)
    else:
        _read(record, chosen, emit, tail_from, timeout, opener)


def _log_path(record: records.RunRecord, task: TaskPlan) -> str:
    return RunLayout(record.host(task.host).run_dir).log_file(task.job, task.index)


def split_tail(stdout: str, paths: Iterable[str]) -> dict[str, list[str]]:
    """`tail`'s output over several files, by path: the lines after each `==> <path> <==` header (a
    header names one of `paths`; a missing file has none)."""
    headers = {f"==> {p} <==": p for p in paths}
    out: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in stdout.splitlines():
        if line in headers:
            current = out.setdefault(headers[line], [])
        elif current is not None:
            current.append(line)
    for lines in out.values():
        if lines and not lines[-1]:
            lines.pop()  # the blank line tail writes before the next header
    return out


def _no_log(path: str, errors: list[str]) -> str:
    why = next((e for e in errors if path in e), "")
    return f"-- no log yet ({why[-160:]})" if why else "-- no log yet"


def _read(record: records.RunRecord, chosen: list[TaskPlan], emit: Callable[[str], None], tail_from: str,
          timeout: float, opener: Opener) -> None:
    """Each chosen log once: one `tail` per host, every host in parallel, emitted in task order per host."""
    def read(host: str) -> list[tuple[TaskPlan, list[str]]]:
        remote = RemoteRun(record.plan.host(host), record.host(host).run_dir, opener)
        tasks = [t for t in chosen if t.host == host]
        paths = [_log_path(record, t) for t in tasks]
        argv = ["tail", "-n", tail_from, "--", "/dev/null", *paths]
        try:
            result = with_retry(host, lambda: remote.run_shell(shell_command(argv), timeout), time.monotonic() + timeout)
        finally:
            remote.close()
        found = split_tail(result.stdout, paths)
        errors = result.stderr.strip().splitlines()
        return [(t, found[p] if p in found else [_no_log(p, errors)]) for t, p in zip(tasks, paths, strict=True)]

    results = fan_out(sorted({t.host for t in chosen}), read)
    for host, res in results.items():
        if isinstance(res, HostError):
            emit(f"-- {host}: {res.one_line()}")
            continue
        for task, text in res:
            for line in text:
                emit(f"{_prefix(task)} {line}")


def _follow(record: records.RunRecord, chosen: list[TaskPlan], emit: Callable[[str], None], tail_from: str,
            stop_event: threading.Event, opener: Opener) -> None:
    """One `tail -F` stream per task, reconnecting with backoff, until stop_event or Ctrl-C."""
    q: queue.Queue[str] = queue.Queue()
    open_streams: list[LineStream] = []  # closed from here on exit: a blocked read then returns

    def follow_one(task: TaskPlan) -> None:
        host, path = task.host, _log_path(record, task)
        remote = RemoteRun(record.plan.host(host), record.host(host).run_dir, opener)
        # The number of the next line to show; None until a FOLLOW_FROM_LAST stream said where it starts.
        # (A stream cut inside a line shows its first part, counted as a line: its rest is not shown.)
        next_line: int | None = 1 if tail_from == "+1" else None
        delay = 0.2
        while not stop_event.is_set():
            try:
                numbered = next_line is None
                argv = (["sh", "-c", FOLLOW_FROM_LAST, "sh", path, tail_from] if next_line is None
                        else ["tail", "-n", f"+{next_line}", "-F", path])
                stream = remote.transport.stream(argv)
                open_streams.append(stream)
                try:
                    for line in stream.lines():
                        if stop_event.is_set():
                            break
                        if numbered:
                            numbered = False
                            if line.strip().isdigit():
                                next_line = int(line)
                                continue
                        q.put(f"{_prefix(task)} {line.rstrip(chr(10))}")
                        if next_line is not None:
                            next_line += 1
                        delay = 0.2  # a stream that delivered: the next reconnect starts from a short wait
                finally:
                    stream.close()
                if stop_event.is_set():
                    break
                q.put(f"-- {_prefix(task)}: stream ended, reconnecting")
                remote.close()  # the next stream asks the opener again (a Slurm job that ended: its submit host)
            except HostError as exc:
                q.put(f"-- {_prefix(task)}: {exc.one_line()}; retrying in {delay:.1f}s")
                remote.close()
            stop_event.wait(delay)
            delay = min(delay * 2, 10.0)
        remote.close()

    threads = [threading.Thread(target=follow_one, args=(t,), daemon=True, name="tfcluster-logs") for t in chosen]
    for th in threads:
        th.start()
    try:
        while not stop_event.is_set():
            try:
                emit(q.get(timeout=0.2))
            except queue.Empty:
                continue
    finally:
        stop_event.set()
        for stream in list(open_streams):
            with contextlib.suppress(Exception):  # closing on the way out; the thread ends anyway
                stream.close()
        while not q.empty():
            emit(q.get_nowait())

