"""A fake `nvidia-smi` for machines with no GPU: the one seam where a host's GPUs are read
(training/telemetry/gpu_use.py runs `nvidia-smi` from the PATH when nvidia-ml-py is not installed).

`install(home, gpus, apps)` writes `<home>/bin/nvidia-smi` and a `.bashrc` and `.profile` that put that
directory first on the PATH, so every command sshd runs for a machine started with this HOME (testkit/sshd.py
`start_machines(n, home=...)`), the supervisor it starts included, finds it there as it would find the
driver's. It answers the two queries tfcluster makes, in nvidia-smi's csv,noheader,nounits format:
`--query-gpu=...` with `gpus` (index, util %, memory used and total MiB, °C, W), and
`--query-compute-apps=...` with one line per `apps` entry whose pid file exists: the pid in it (a REAL
process, written by the program itself), on that GPU, holding that many MiB. Each call is appended to
`<home>/nvidia-smi.calls` (what was asked, and when).
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class FakeGpu:
    index: int
    util_pct: float
    mem_used_mb: float
    mem_total_mb: float = 16384.0
    temp_c: float = 60.0
    power_w: float = 200.0

    @property
    def uuid(self) -> str:
        return f"GPU-fa4e0000-0000-0000-0000-{self.index:012d}"


@dataclass(frozen=True)
class FakeApp:
    pid_file: str  # the process writes its own pid here
    gpu: int
    mib: float


SCRIPT = '''\
#!{python}
"""A fake nvidia-smi (testkit/fake_gpus.py): it fakes the GPU and nothing else."""
import json, os, sys, time
here = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(here, "fake-gpus.json")) as f:
    cfg = json.load(f)
args = sys.argv[1:]
with open(cfg["calls"], "a") as f:
    f.write(json.dumps({{"t": time.time(), "args": args}}) + "\\n")
uuids = {{g["index"]: g["uuid"] for g in cfg["gpus"]}}
if any(a.startswith("--query-gpu=") for a in args):
    for g in cfg["gpus"]:
        print(", ".join(str(g[k]) for k in ("index", "uuid", "util_pct", "mem_used_mb", "mem_total_mb",
                                             "temp_c", "power_w")))
elif any(a.startswith("--query-compute-apps=") for a in args):
    for app in cfg["apps"]:
        try:
            with open(app["pid_file"]) as f:
                pid = int(f.read().strip())
        except (OSError, ValueError):
            continue  # the program has not started yet
        print(f"{{pid}}, {{uuids[app['gpu']]}}, {{app['mib']:g}}")
else:
    print("fake nvidia-smi: only --query-gpu and --query-compute-apps", file=sys.stderr)
    sys.exit(2)
'''


def install(home: Path, gpus: list[FakeGpu], apps: list[FakeApp]) -> Path:
    """The fake in `<home>/bin`, first on the PATH of every shell started with HOME=home; returns its path."""
    bin_dir = home / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    cfg = {"calls": str(home / "nvidia-smi.calls"),
           "gpus": [{"index": g.index, "uuid": g.uuid, "util_pct": g.util_pct, "mem_used_mb": g.mem_used_mb,
                     "mem_total_mb": g.mem_total_mb, "temp_c": g.temp_c, "power_w": g.power_w} for g in gpus],
           "apps": [{"pid_file": a.pid_file, "gpu": a.gpu, "mib": a.mib} for a in apps]}
    (bin_dir / "fake-gpus.json").write_text(json.dumps(cfg))
    smi = bin_dir / "nvidia-smi"
    smi.write_text(SCRIPT.format(python=sys.executable))
    smi.chmod(0o755)
    line = f'export PATH="{bin_dir}:$PATH"\n'
    for rc in (".bashrc", ".profile"):  # bash run by sshd reads .bashrc; a login shell (login_shell) .profile
        (home / rc).write_text(line)
    return smi
