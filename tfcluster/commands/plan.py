"""`tfcluster plan hosts.toml`: what would run where (tasks, ports, devices, commands), nothing started; for a
[slurm] job also each node index's tasks and the sbatch options of its allocation."""

from __future__ import annotations

import json
import shlex
import sys
from typing import TYPE_CHECKING, Annotated

import typer

from orchestrator.bench.spec import DEFAULT_NIC_GBPS
from tfcluster.common import HostsFile, console, widen

if TYPE_CHECKING:
    from rich.console import Console

    from orchestrator.plan.model import ClusterPlan, TaskPlan
    from orchestrator.plan.ps_load import PsLoadEstimate
    from orchestrator.plan.slurm import SlurmPlan

MIN_WIDTH = 160  # a pipe or a test gets 80 columns by default: too narrow for the command column


def register(app: typer.Typer) -> None:
    app.command("plan")(plan)


def plan(
    hosts_file: HostsFile,
    as_json: Annotated[bool, typer.Option("--json", help="Print the plan as JSON on stdout, nothing else.")] = False,
    steps_per_sec: Annotated[
        float,
        typer.Option(min=0.001, help="Assumed training steps per second per worker, for the PS load estimate."),
    ] = 10.0,
    nic_gbps: Annotated[
        float, typer.Option(min=0.001, help="The PS hosts' NIC in Gb/s each way, for the PS-bandwidth ceiling.")
    ] = DEFAULT_NIC_GBPS,
) -> None:
    """Show every task the cluster would run: host, job:task, port, device (GPU:0-3 for a task with several
    GPUs), CUDA_VISIBLE_DEVICES, command."""
    from rich.text import Text

    from orchestrator.bench.scaling import advise, nic_capacity_Bps
    from orchestrator.plan.from_file import any_plan_file
    from orchestrator.plan.ps_load import estimate_ps_load
    from orchestrator.plan.sbatch import sbatch_options
    from orchestrator.plan.slurm import SlurmPlan

    planned = any_plan_file(hosts_file)
    job = planned if isinstance(planned, SlurmPlan) else None
    cluster = planned.plan if isinstance(planned, SlurmPlan) else planned
    estimate = estimate_ps_load(cluster, steps_per_sec)
    advice = advise(cluster, nic_capacity_Bps(nic_gbps), steps_per_sec)
    if as_json:
        data = cluster.to_json()
        data["ps_load_estimate"] = estimate.to_json() if estimate else None
        data["ps_ceiling"] = {**advice.to_json(), "nic_gbps": nic_gbps} if advice else None
        if job is not None:
            data["slurm"] = {**job.to_json(), "sbatch_options": [" ".join(o) for o in sbatch_options(job)]}
        sys.stdout.write(json.dumps(data, indent=2) + "\n")
        return
    out = widen(console(), MIN_WIDTH)
    if job is not None:
        print_slurm_job(out, job)
    print_plan(out, cluster, estimate)
    if advice is not None:
        for line in advice.lines():
            out.print(Text(line), soft_wrap=True)
        out.print(Text(f"  (link: a {nic_gbps:g} Gb/s NIC each way; --nic-gbps, or measure it: tfcluster bench "
                           "--measure-nic)", style="dim"), soft_wrap=True)


def print_plan(console: Console, cluster: ClusterPlan, estimate: PsLoadEstimate | None) -> None:
    from rich.table import Table
    from rich.text import Text

    from orchestrator.plan.checkpoints import checkpoint_note

    console.print(
        Text.assemble(
            ("cluster ", "bold"), (cluster.cluster_name, "bold cyan"),
            f"  mode {cluster.mode}  ·  {len(cluster.tasks)} tasks on {len(cluster.hosts)} hosts",
        )
    )
    table = Table(show_lines=False, header_style="bold")
    for column in ("host", "address", "task", "port", "device", "CUDA_VISIBLE_DEVICES", "chief", "command"):
        table.add_column(column, overflow="fold", no_wrap=column != "command")
    for host in cluster.hosts:
        tasks = cluster.tasks_on(host.name)
        if not tasks:
            table.add_row(host.name, Text(host.address), Text("(no tasks)", style="dim"), "", "", "", "", "",
                          end_section=True)
            continue
        for i, task in enumerate(tasks):
            table.add_row(
                host.name if i == 0 else "",
                Text(host.address if i == 0 else ""),  # as written: never read as Rich markup
                task.name,
                str(task.port),
                device_text(task),
                task.cuda_visible_devices if task.cuda_visible_devices else '""',
                "chief" if task.is_chief else "",
                Text(command_text(task)),
                end_section=i == len(tasks) - 1,
            )
    console.print(table)
    for warning in cluster.warnings:
        console.print(Text.assemble(("warning: ", "bold yellow"), warning), soft_wrap=True)
    console.print(Text(checkpoint_note(cluster)), soft_wrap=True)
    if estimate is not None:
        console.print(Text(estimate.one_line()), soft_wrap=True)
    else:
        console.print(Text("PS load estimate: model size unknown (the user's own program or model)", style="dim"))


def device_text(task: TaskPlan) -> str:
    """Where the task computes: its device, and with several GPUs all of them (`.../device:GPU:0-3`: the
    task sees its CUDA_VISIBLE_DEVICES as GPU:0 ... GPU:3)."""
    if len(task.gpus) > 1:
        return f"{task.device}-{len(task.gpus) - 1}"
    return task.device


def command_text(task: TaskPlan) -> str:
    """The command as the host's shell would see it; the user's `sh -c` script shown as written."""
    if task.command[:2] == ["/bin/sh", "-c"]:
        return task.command[2]
    return shlex.join(task.command)


def print_slurm_job(console: Console, job: SlurmPlan) -> None:
    """Each node (by index until the allocation exists) with its tasks, then the allocation's #SBATCH lines."""
    from rich.table import Table
    from rich.text import Text

    from orchestrator.plan.sbatch import sbatch_header

    console.print(Text.assemble(("Slurm job ", "bold"), f"{len(job.ranks)} tasks on {len(job.nodes)} nodes, one rank "
                                "each, as SlurmClusterResolver lays them out (nodes in name order)"))
    table = Table(header_style="bold")
    for column in ("node", "ranks", "tasks"):
        table.add_column(column)
    rank = 0
    for index, (node, tasks) in enumerate(job.layout()):
        name = f"{index}" if not job.allocated else f"{index} {node.name} ({node.address})"
        table.add_row(Text(name), f"{rank}-{rank + len(tasks) - 1}" if len(tasks) > 1 else str(rank),
                      " ".join(t.name for t in tasks))
        rank += len(tasks)
    console.print(table)
    console.print(Text("sbatch script header (`tfcluster export slurm` writes the whole script):", style="bold"))
    for line in sbatch_header(job):
        console.print(Text(line), soft_wrap=True)
