"""`tfcluster resize`: bring a running run over SSH to a resized plan.

The change is orchestrator.plan.resize_diff's `Resize` (only workers change; the run's ports kept). In
order, each step undone when a later one fails, so a failed resize leaves the run as it was:
1. the run's data (its peer channel's key) is read from a running host's run.json;
2. new hosts are prepared and launched exactly as `start` does a host (orchestrator.run.start_host: the
   code shipped, the ports checked free, run.json with the new plan, the supervisor launched, its tasks
   running); just before they are launched the record is saved with them pending (run/resize_pending.py:
   `stop` then visits them too, even when this process is killed); undone by stopping them and removing
   their run dirs, and the record saved without them (but with any whose stop could not be verified);
3. every kept host gets the new run.json and its supervisor takes on its new tasks and drops its removed
   ones (training/supervisor/resize.py), acknowledged in its state; the tasks it dropped are then looked
   for in /proc: verified gone. Undone by giving the hosts the old plan back (a dropped task starts again,
   an added one ends);
4. hosts that leave are stopped as `stop` stops a host, verified, and their run dirs removed;
5. the record is saved with the new plan, its hosts, and a history entry (records.RunRecord.resizes), no
   longer pending. Until then the record's plan and hosts are the run as it was.
The kept tasks a resize restarts are `--restart-all`'s, or those the mode restarts (run/resize_restart.py:
in-graph's client, multi-worker-mirrored's group, every kept task of synchronous between-graph and
parameter-server-strategy, the ps too); all but in-graph's take steps 3 then 2 (`kept_first`: the kept
tasks restart with the new cluster and wait for the new ones; a failure of either gives the kept hosts the
old plan back, the restarted tasks restarting as they were).
A run whose record has a resize pending (one under way, or killed half-way) is not resized again.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from orchestrator.errors import HostError, UsageError
from orchestrator.plan.model import ClusterPlan
from orchestrator.plan.names import file_stem
from orchestrator.plan.resize_diff import Resize
from orchestrator.run import records, resize_pending
from orchestrator.run.launch import forwarded_env
from orchestrator.run.port_check import PortsTaken, ports_to_try, refusal
from orchestrator.run.remote import RemoteRun, with_retry
from orchestrator.run.resize_host import await_resized, left_running, ports_taken, push, run_data
from orchestrator.run.resize_restart import kept_first, mode_restarts
from orchestrator.run.run_file import RunFiles
from orchestrator.run.ship import file_sets
from orchestrator.run.start_host import HostOutcome, StartContext, StartShard
from orchestrator.run.stop import HostStop, stop_hosts
from orchestrator.transport.factory import Opener, transport_for
from orchestrator.transport.fan_out import fan_out


class ResizeFailed(HostError):
    """The resize failed on a host; `undone` says what was undone (the run is as it was where verified)."""

    def __init__(self, error: HostError, undone: str, unverified: Sequence[str] = ()) -> None:
        super().__init__(error.host, error.reason, f"{error.detail or 'failed'} (resize undone: {undone})")
        self.undone = undone
        self.error = error  # what failed, before the undo was said
        self.unverified = tuple(unverified)  # new hosts whose stop could not be verified: still pending


@dataclass
class ResizeOptions:
    timeout: float = 120.0  # the whole resize
    op_timeout: float = 30.0  # one remote step
    grace: float = 10.0  # a removed host's tasks, after SIGTERM
    restart_all: bool = False  # also restart every task that stays, with the new TF_CONFIG


@dataclass
class ResizeResult:
    record: records.RunRecord
    restarted: list[str] = field(default_factory=list)  # tasks that stay but were restarted
    left: dict[str, str] = field(default_factory=dict)  # host -> what could not be verified gone
    seconds: float = 0.0


def restarted_by(change: Resize, restart_all: bool) -> list[str]:
    """The tasks that stay where they are but restart: every one with --restart-all, else those the run's
    mode restarts (resize_restart.py: in-graph's client, multi-worker-mirrored's group, every kept task of
    a synchronous between-graph or parameter-server-strategy run), else none (a moved worker is a new task
    where it goes)."""
    if not restart_all:
        return mode_restarts(change)
    return [t.name for t in change.staying]


def resize(record: records.RunRecord, change: Resize, config_path: str, options: ResizeOptions | None = None,
           opener: Opener = transport_for) -> ResizeResult:
    options = options or ResizeOptions()
    busy = resize_pending.under_way(record)
    if busy:
        raise UsageError(f"{busy}; nothing changed")
    t0 = time.monotonic()
    deadline = t0 + options.timeout
    new, old = change.new, change.old
    kept = [h.name for h in old.hosts if h.name not in change.hosts_removed]
    if not kept:  # the ps and the chief stay, so their hosts do: never here for a plan_resize change
        raise UsageError("a resize keeps at least one host of the run")
    remotes = {n: RemoteRun(old.host(n), record.host(n).run_dir, opener) for n in kept}
    try:
        data = with_retry(kept[0], lambda: run_data(remotes[kept[0]], options.op_timeout), deadline)
        # Above any serial a host saw (a failed resize's undo used one too): the supervisors act on a higher one.
        seen = data.get("resize", {}).get("serial", 0) if isinstance(data.get("resize"), dict) else 0
        serial = max(seen if isinstance(seen, int) else 0, int(time.time() * 1000)) + 1
        data.pop("resize", None)
        restarted = restarted_by(change, options.restart_all)
        restart = [_stems(change)[n] for n in (*change.moved, *restarted)]
        new_files = RunFiles({**data, "resize": {"serial": serial, "restart": restart}}, new)
        _ports_free_on_kept(change, remotes, options, deadline)

        def pending(run_dirs: dict[str, str]) -> None:
            resize_pending.mark(record, new, run_dirs)
            records.save(record)

        try:
            if kept_first(old):
                joined = _kept_then_new(record, change, config_path, (remotes, data, serial, restarted),
                                        options, opener, deadline, pending)
            else:
                joined = _start_new_hosts(record, change, config_path, new_files, options, opener, deadline, pending)
                try:
                    _apply_on_kept(new, remotes, new_files, serial, _fresh(change, restarted), options, deadline)
                except (HostError, KeyboardInterrupt) as exc:  # Ctrl-C too: the run is given back as it was
                    undone = _give_back(change, remotes, data, serial + 1, options, restarted)
                    stopped, dirty = _stop_new(record, new, joined, options, opener)
                    error = exc if isinstance(exc, HostError) else HostError(kept[0], "cancelled", "interrupted")
                    raise ResizeFailed(error, f"{undone}; {stopped}", dirty) from None
        except ResizeFailed as failed:
            if record.pending_resize is not None:  # the record says the run as it was, and what may be left
                resize_pending.keep_only(record, failed.unverified)
                records.save(record)
            raise
        left = _verify_dropped(change, remotes, options)
        gone = stop_hosts(record, change.hosts_removed, grace=options.grace, timeout=options.op_timeout,
                          purge=True, opener=opener)
        left.update({n: r.error or f"left running: {', '.join(str(p.pid) for p in r.remaining)}"
                     for n, r in gone.items() if not r.ok})
    finally:
        for remote in remotes.values():
            remote.close()
    _record(record, change, joined, restarted, config_path)
    return ResizeResult(record=record, restarted=restarted, left=left, seconds=time.monotonic() - t0)


def _kept_then_new(record: records.RunRecord, change: Resize, config_path: str,
                   kept: tuple[dict[str, RemoteRun], dict[str, Any], int, list[str]], options: ResizeOptions,
                   opener: Opener, deadline: float, pending: Callable[[dict[str, str]], None]) -> dict[str, HostOutcome]:
    """Steps 3 then 2, for the modes whose kept tasks restart before a new worker may start
    (resize_restart.kept_first: multi-worker-mirrored's group, every kept task of synchronous between-graph
    and parameter-server-strategy): they restart with the new cluster and wait for the new workers, then the
    new hosts are launched. Either failing, the kept hosts get the old plan back (the restarted tasks
    restart as they were) and nothing new is left.

    Step 3 takes two serials. The first gives every kept host the new plan and restarts nothing (a moved
    worker aside): each supervisor's group members will start with the new cluster from then on. Only when
    every kept host has it does the second restart the group. A member that loses its group to a peer's
    restart before its own host has the second is restarted by its supervisor's group policy, with the new
    cluster, and the second then leaves it be (training/supervisor/resize.py): once restarted, not twice.
    Synchronous between-graph and parameter-server-strategy have no group policy: the second restarts each
    kept task, the ps with the trainers, on each host at once (a trainer that meets the old ps first fails
    over when it restarts: the chief then restores the checkpoint into the new one)."""
    remotes, data, serial, restarted = kept
    stems = _stems(change)
    first = RunFiles({**data, "resize": {"serial": serial, "restart": [stems[n] for n in change.moved]}}, change.new)
    second = RunFiles({**data, "resize": {"serial": serial + 1, "restart": [stems[n] for n in restarted]}}, change.new)
    try:
        _apply_on_kept(change.new, remotes, first, serial, {*change.added, *change.moved}, options, deadline)
        _apply_on_kept(change.new, remotes, second, serial + 1, set(restarted), options, deadline)
    except (HostError, KeyboardInterrupt) as exc:
        undone = _give_back(change, remotes, data, serial + 2, options, restarted)
        error = exc if isinstance(exc, HostError) else HostError(next(iter(remotes)), "cancelled", "interrupted")
        raise ResizeFailed(error, f"{undone}; no new host was started") from None
    try:
        return _start_new_hosts(record, change, config_path, second, options, opener, deadline, pending)
    except (HostError, UsageError, KeyboardInterrupt) as exc:  # a ResizeFailed: its new hosts are undone
        undone = _give_back(change, remotes, data, serial + 2, options, restarted)
        if isinstance(exc, ResizeFailed):
            raise ResizeFailed(exc.error, f"{exc.undone}; {undone}", exc.unverified) from None
        error = exc if isinstance(exc, HostError) else HostError(change.hosts_added[0], "cancelled", str(exc) or "interrupted")
        raise ResizeFailed(error, undone) from None


def _stems(change: Resize) -> dict[str, str]:
    """Task name (`worker:1`) -> its storage name on the hosts (`worker-1`: run.json's `restart`)."""
    return {t.name: file_stem(t.job, t.index) for t in (*change.old.tasks, *change.new.tasks)}


def _ports_free_on_kept(change: Resize, remotes: dict[str, RemoteRun], options: ResizeOptions,
                       deadline: float) -> None:
    """Before anything changes: the ports of the kept hosts' new tasks are free there, or PortsTaken (exit 2)."""
    wanted = {n: [[t.name, "", t.port] for t in change.new.tasks_on(n)
                  if t.in_cluster and (t.name in change.added or t.name in change.moved)] for n in remotes}
    asked = fan_out([n for n in remotes if wanted[n]], lambda n: with_retry(
        n, lambda: ports_taken(remotes[n], change.new.host(n).python, wanted[n], options.op_timeout), deadline))
    _raise_first(asked)
    taken = {n: r for n, r in asked.items() if isinstance(r, list) and r}
    if taken:
        raise _ports_refusal(taken)


def _ports_refusal(taken: dict[str, list[tuple[str, int, str]]]) -> PortsTaken:
    """start's one line for taken ports, with what a resize can do about it (not `--auto-ports`)."""
    line = str(refusal(taken)).split("; nothing was started", 1)[0]
    return PortsTaken(f"{line}; nothing changed (a resize gives new tasks ports above the run's: free that one, "
                      "or stop the program holding it)")


def _start_new_hosts(record: records.RunRecord, change: Resize, config_path: str, files: RunFiles,
                     options: ResizeOptions, opener: Opener, deadline: float,
                     before_launch: Callable[[dict[str, str]], None]) -> dict[str, HostOutcome]:
    """Step 2: the new hosts prepared and launched as `start` does; on a failure nothing of them is left.
    `before_launch` gets each prepared host's run dir (the record marks them pending)."""
    if not change.hosts_added:
        return {}
    new = change.new
    sync = file_sets(new.training.sync, os.path.dirname(os.path.abspath(config_path)), config_path)
    hosts = [new.host(n) for n in change.hosts_added]
    wanted = ports_to_try(new)
    ctx = StartContext(
        run_id=record.run_id, run_file=files.for_host, files=sync, op_timeout=options.op_timeout,
        timeout=options.timeout, deadline=deadline, allow_partial=False, progress=lambda *_: None,
        host_ports={h.name: wanted[h.name] for h in hosts}, forward_env=forwarded_env(new, config_path),
    )
    runner = StartShard(ctx, hosts, opener)
    names = [h.name for h in hosts]
    try:
        runner.prepare()
        failed = [runner.outcomes[n].error for n in names if runner.outcomes[n].error is not None]
        taken = {n: runner.outcomes[n].taken for n in names if runner.outcomes[n].taken}
        if failed or taken:
            runner.release()
            error = failed[0] if failed and failed[0] is not None else None
            if error is None:
                raise _ports_refusal(taken)
            raise ResizeFailed(error, "nothing was started: the new hosts' run dirs removed")
        try:
            before_launch({n: runner.outcomes[n].run_dir for n in names})
        except BaseException:  # the record could not say where they would run: they never do
            runner.release()
            raise
        try:
            runner.launch(names, extend=max(runner.outcomes[n].ship_s for n in names))
        except KeyboardInterrupt:
            undone, dirty = _stop_new(record, new, runner.outcomes, options, opener)
            raise ResizeFailed(HostError(names[0], "cancelled", "interrupted"), undone, dirty) from None
    finally:
        ctx.cancel.set()
        runner.close()
    launched_failed = [runner.outcomes[n].error for n in names if runner.outcomes[n].error is not None]
    if launched_failed and launched_failed[0] is not None:
        raise ResizeFailed(launched_failed[0], *_stop_new(record, new, runner.outcomes, options, opener))
    return runner.outcomes


def _stop_new(record: records.RunRecord, new: ClusterPlan, outcomes: dict[str, HostOutcome],
              options: ResizeOptions, opener: Opener) -> tuple[str, list[str]]:
    """Stop and remove what was started on new hosts; says what its own verification saw, and which hosts
    it could not verify."""
    started = [n for n, o in outcomes.items() if o.run_dir]
    if not started:
        return "no new host was started", []
    probe = dataclasses.replace(record, plan=new, hosts=[
        records.HostRecord(name=n, workdir=new.host(n).workdir, run_dir=outcomes[n].run_dir, started=True)
        for n in started])
    result = stop_hosts(probe, started, grace=min(options.grace, 5.0), timeout=options.op_timeout, purge=True,
                        opener=opener)
    clean = [n for n in started if result.get(n, HostStop(n, ok=False)).ok]
    dirty = [n for n in started if n not in clean]
    said = f"stopped and removed what was started on {', '.join(clean)}, verified" if clean else ""
    if dirty:
        said += ("; " if said else "") + f"COULD NOT VERIFY the stop on {', '.join(dirty)}: " + "; ".join(
            f"{n}: {result[n].error or 'processes left'}" if n in result else f"{n}: not reached" for n in dirty)
    return said, dirty


def _fresh(change: Resize, restarted: Sequence[str]) -> set[str]:
    """The tasks a resize starts on the kept hosts: added, moved, restarted."""
    return {*change.added, *change.moved, *restarted}


def _apply_on_kept(new: ClusterPlan, remotes: dict[str, RemoteRun], files: RunFiles, serial: int,
                   fresh_names: set[str], options: ResizeOptions, deadline: float) -> None:
    """Step 3: every kept host's run.json (`new`'s) replaced; wait until each supervisor applied it and its
    `fresh_names` tasks there run."""

    def one(name: str) -> None:
        remote = remotes[name]
        with_retry(name, lambda: push(remote, files.for_host(name), options.op_timeout), deadline)
        fresh = [(t.job, t.index) for t in new.tasks_on(name) if t.name in fresh_names]
        await_resized(remote, serial, fresh, deadline)

    _raise_first(fan_out(list(remotes), one))


def _give_back(change: Resize, remotes: dict[str, RemoteRun], data: dict[str, Any], serial: int,
               options: ResizeOptions, restarted: Sequence[str] = ()) -> str:
    """Undo step 3: the kept hosts get the old plan back (moved workers restart where they were, and the
    `restarted` ones again with the old cluster)."""
    old = change.old
    restart = [_stems(change)[n] for n in (*change.moved, *restarted)]
    files = RunFiles({**data, "resize": {"serial": serial, "restart": restart}}, old)
    deadline = time.monotonic() + options.timeout

    def one(name: str) -> None:
        remote = remotes[name]
        with_retry(name, lambda: push(remote, files.for_host(name), options.op_timeout), deadline)
        back = {*change.removed, *change.moved, *restarted}
        await_resized(remote, serial, [(t.job, t.index) for t in old.tasks_on(name) if t.name in back], deadline)

    results = fan_out(list(remotes), one)
    bad = {n: r for n, r in results.items() if isinstance(r, HostError)}
    said = f"gave {', '.join(n for n in remotes if n not in bad)} the run's plan back" if len(bad) < len(remotes) else ""
    if bad:
        said += ("; " if said else "") + "COULD NOT give the plan back to " + "; ".join(
            f"{n}: {e.one_line()}" for n, e in bad.items())
    return said


def _verify_dropped(change: Resize, remotes: dict[str, RemoteRun], options: ResizeOptions) -> dict[str, str]:
    """Each kept host's dropped tasks (removed, or moved away): no process of them is left there."""
    dropped: dict[str, list[str]] = {}
    for t in change.old.tasks:
        if t.host in remotes and (t.name in change.removed or t.name in change.moved):
            dropped.setdefault(t.host, []).append(file_stem(t.job, t.index))
    left = fan_out(list(dropped), lambda n: left_running(remotes[n], dropped[n], options.op_timeout))
    return {n: (r.one_line() if isinstance(r, HostError) else f"left running: {'; '.join(r)}")
            for n, r in left.items() if isinstance(r, HostError) or r}


def _raise_first(results: dict[str, Any]) -> None:
    errors = [r for r in results.values() if isinstance(r, HostError)]
    if errors:
        raise errors[0]


def _record(record: records.RunRecord, change: Resize, joined: dict[str, HostOutcome], restarted: list[str],
            config_path: str) -> None:
    """Step 5: the record holds the new plan, its hosts (in the plan's order) and the resize's history."""
    by_name = {h.name: h for h in record.hosts}
    hosts = []
    for h in change.new.hosts:
        if h.name in by_name:
            hosts.append(by_name[h.name])
        else:
            out = joined[h.name]
            hosts.append(records.HostRecord(name=h.name, workdir=h.workdir, run_dir=out.run_dir, python=h.python,
                                            supervisor_pid=out.supervisor_pid, started=True))
    record.replace_plan(change.new)
    record.hosts = hosts
    record.pending_resize = None  # its hosts are the run's now
    record.resizes.append({"at": time.time(), "hosts_file": os.path.abspath(config_path), **change.summary(),
                           "restarted": restarted, "lines": change.lines()})
    record.notes.append("resized: " + "; ".join(change.lines()))
    records.save(record)
