"""`tfcluster export slurm hosts.toml > job.sbatch`: a standalone sbatch script for the [slurm] job of
hosts.toml, which runs the same tasks without tfcluster's orchestrator (orchestrator.plan.sbatch)."""

from __future__ import annotations

import sys

import typer

from tfcluster.common import HostsFile

export_app = typer.Typer(help="Write what runs the cluster without tfcluster: `export slurm HOSTS > job.sbatch`.",
                         no_args_is_help=True)


def register(app: typer.Typer) -> None:
    app.add_typer(export_app, name="export")


@export_app.command("slurm")
def slurm(hosts_file: HostsFile) -> None:
    """Print an sbatch script for hosts.toml's [slurm] job: TF_CONFIG per rank from SLURM_PROCID and the
    allocation's nodes, each rank on its planned node; submit it with `sbatch`."""
    from orchestrator.plan.from_file import slurm_plan_file
    from orchestrator.plan.sbatch import export_script

    sys.stdout.write(export_script(slurm_plan_file(hosts_file), str(hosts_file)))
