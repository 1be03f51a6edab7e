"""`check`'s probe of one host: is it ready to run its part of the plan? One JSON line on stdout.

Not shipped as a file: `tfcluster check` sends this module's source to the host's own `python -c`
(nothing is installed or copied there yet), with one JSON argument: {"ports": [...], "workdir": "...",
"import_tf": bool, "tf_distributions": [...]}. So it must run on any Python 3.6+, use only the standard
library, and print exactly one JSON object: Python and TensorFlow versions, GPUs (`nvidia-smi -L`),
whether each planned port can be bound, free disk and writability of the workdir, and the time.

The TensorFlow version is read from its package's .dist-info directory, not by importing TensorFlow
(seconds per host); `import_tf` imports it for real.
"""

import json
import os
import sys
import time
from typing import Any  # noqa: F401 - named in type comments

from .port_probe import port_problem  # inlined when sent (orchestrator/run/inline_source.py)


def tf_report(distributions, import_tf):
    # type: (list[str], bool) -> tuple[bool, str | None, str | None]
    """(found, version, error) for TensorFlow under this interpreter."""
    found, version, error = False, None, None  # type: bool, str | None, str | None
    try:
        import importlib.util

        spec = importlib.util.find_spec("tensorflow")
        found = spec is not None
        locations = list(spec.submodule_search_locations or []) if spec else []
        for site in {os.path.dirname(p) for p in locations}:
            for name in sorted(os.listdir(site)):
                stem, _, ext = name.rpartition(".")
                dist, _, dist_version = stem.partition("-")
                if ext == "dist-info" and dist.lower().replace("_", "-") in distributions:
                    version = dist_version
        if found and version is None:  # unusual layout: ask the (slower) metadata API
            import importlib.metadata as md

            for dist in distributions:
                try:
                    version = md.version(dist)
                    break
                except md.PackageNotFoundError:
                    pass
    except Exception as e:
        error = repr(e)
    if import_tf and found:
        try:
            import tensorflow as tf

            version = tf.__version__
        except Exception as e:
            found, error = False, "import tensorflow failed: %r" % (e,)
    return found, version, error


def gpu_report():
    # type: () -> tuple[int, str | None]
    """(GPU count, error) from `nvidia-smi -L`; no nvidia-smi on PATH = 0 GPUs."""
    smi = [os.path.join(d, "nvidia-smi") for d in os.environ.get("PATH", "").split(os.pathsep) if d]
    smi = [p for p in smi if os.access(p, os.X_OK)]
    if not smi:
        return 0, None
    try:
        import subprocess

        out = subprocess.run([smi[0], "-L"], check=False, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=15)
    except Exception as e:
        return 0, "nvidia-smi -L failed: %r" % (e,)
    if out.returncode != 0:
        err = out.stderr.decode(errors="replace").strip()[:200]
        return 0, "nvidia-smi -L exited %d: %s" % (out.returncode, err)
    return sum(1 for line in out.stdout.decode(errors="replace").splitlines() if line.startswith("GPU ")), None


def workdir_report(workdir):
    # type: (str) -> dict[str, object]
    """The absolute workdir, whether it exists, whether it (or its nearest parent) is writable, free bytes."""
    wd = os.path.expanduser(workdir)
    if not os.path.isabs(wd):
        wd = os.path.join(os.path.expanduser("~"), wd)
    probe = wd
    while not os.path.isdir(probe):
        parent = os.path.dirname(probe)
        if parent == probe:
            break
        probe = parent
    try:
        st = os.statvfs(probe)
        free = st.f_bavail * st.f_frsize
    except OSError:
        free = None
    return {"workdir": wd, "workdir_exists": os.path.isdir(wd),
            "workdir_writable": os.access(probe, os.W_OK | os.X_OK), "disk_free_bytes": free}


def report(args):
    # type: (dict[str, Any]) -> dict[str, object]
    r = {"python_version": sys.version.split()[0], "python_executable": sys.executable}  # type: dict[str, object]

    r["tf_found"], r["tf_version"], tf_error = tf_report(args["tf_distributions"], args["import_tf"])
    if tf_error:
        r["tf_error"] = tf_error
    r["gpus"], r["gpu_error"] = gpu_report()
    # [[port, address or ""], ...]: a TF port on every interface, a supervisor's on its own address
    r["ports"] = {str(port): port_problem(port, address) for port, address in args["ports"]}
    r.update(workdir_report(args["workdir"]))
    r["t_end"] = time.time()
    return r


if __name__ == "__main__":
    print(json.dumps(report(json.loads(sys.argv[1]))))
