"""`check`'s probe of one host: is it ready to run its part of the plan? One JSON line on stdout.

Not shipped as a file: `tfcluster check` sends this module's source to the host's own `python -c`
(nothing is installed or copied there yet), with one JSON argument: {"ports": [...], "workdir": "...",
"import_tf": "always" | "cached" | "never", "skip_keras": true when the plan's tasks import TensorFlow
without Keras' eager load (a built-in model: training/task.py), "tf_distributions": [...], "checkpoint_dir": null or the
absolute shared checkpoint directory to try and identify like the workdir}. So it must run on any Python
3.6+, use only the standard library, and print exactly one JSON object (before a real import of
TensorFlow, also the line IMPORTING_TF): Python and TensorFlow versions,
GPUs (`nvidia-smi -L`), whether each planned port can be bound, the workdir (usable, its id, this
machine's id: training/probes/workdir_probe.py), free disk, and the time.

The TensorFlow version is read from its package's .dist-info directory, not by importing TensorFlow
(seconds per host). `import_tf = "always"` imports it for real; `"cached"` (the built-in model and the
TF2 modes need TensorFlow to import) imports it once per (machine, python, python's mtime, TensorFlow's
`__init__.py` and its mtime) and keeps the answer in the login's cache ($XDG_CACHE_HOME/tfcluster, by
default ~/.cache/tfcluster: every workdir and run of that user on that machine shares it).

`gpus` (the CUDA_VISIBLE_DEVICES of the host's built-in tasks together, "" for none): the import then
also lists the GPUs TensorFlow sees under it, as each task does before it trains
(training/probes/gpu_check.py): `tf_gpus_seen` and, when fewer, `tf_gpu_cause`. That answer is part of the
cached one; a shortfall is never cached (a driver or CUDA library fix changes no file the key names).
"""

import contextlib
import json
import os
import sys
import time
from typing import Any  # noqa: F401 - named in type comments

from .gpu_check import TeeStderr, likely_cause, planned_gpus, visible_gpus  # inlined when sent
from .port_probe import port_problem  # inlined when sent (orchestrator/run/inline_source.py)
from .workdir_probe import machine_id, try_write, workdir_id, workdir_report  # inlined too

IMPORTING_TF = "tfcluster-probe: importing tensorflow"  # said before a real import, which takes seconds


def tf_report(distributions, import_tf, cache_dir, gpus=""):
    # type: (list[str], str, str | None, str) -> tuple[bool, str | None, str | None, dict[str, Any]]
    """(found, version, error, the GPU answer: {} or {"tf_gpus_seen", "tf_gpu_cause"}) for TensorFlow
    under this interpreter."""
    found, version, error = False, None, None  # type: bool, str | None, str | None
    seen = {}  # type: dict[str, Any]
    origin = None  # type: str | None
    try:
        import importlib.util

        spec = importlib.util.find_spec("tensorflow")
        found = spec is not None
        origin = spec.origin if spec else None
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
    if found and import_tf != "never":
        imported = import_tensorflow(cache_dir if import_tf == "cached" else None, origin, gpus)
        if imported.get("error"):
            found, error = False, str(imported["error"])
        else:
            version = imported.get("version") or version
            seen = {k: v for k, v in imported.items() if k.startswith("tf_gpu")}
    return found, version, error, seen


def login_cache_dir():
    # type: () -> str
    """The login's cache (one per machine and user, whatever the workdir): $XDG_CACHE_HOME/tfcluster."""
    return os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"),
                        "tfcluster")


def import_tensorflow(cache_dir, origin, gpus=""):
    # type: (str | None, str | None, str) -> dict[str, Any]
    """{"version": ...} (with the GPUs it sees under CUDA_VISIBLE_DEVICES=`gpus`, when given) or {"error": ...}
    of a real `import tensorflow`, from the cache when the same machine, python and TensorFlow files (and
    `gpus`) answered before."""
    import hashlib

    key = {"machine": machine_id(), "python": os.path.realpath(sys.executable), "tf": origin}  # type: dict[str, Any]
    if gpus:
        key["gpus"] = gpus
    try:
        key["python_mtime"] = os.stat(key["python"]).st_mtime
        key["tf_mtime"] = os.stat(origin).st_mtime if origin else None
    except OSError:
        cache_dir = None
    path = None
    if cache_dir is not None:
        digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:32]
        path = os.path.join(cache_dir, "tf-import-%s.json" % digest)
        try:
            with open(path) as f:
                cached = json.load(f)
            if cached.get("key") == key:
                return dict(cached["answer"])
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            pass
    print(IMPORTING_TF, flush=True)  # `check` gives the import time of its own (orchestrator/run/probe_stream.py)
    answer = _import_and_list(gpus)
    if path is not None and cache_dir is not None and "tf_gpu_cause" not in answer:
        try:
            os.makedirs(cache_dir, mode=0o700, exist_ok=True)
            tmp = "%s.%d.tmp" % (path, os.getpid())
            with open(tmp, "w") as f:
                json.dump({"key": key, "answer": answer}, f)
            os.replace(tmp, path)
        except OSError:
            pass  # no cache: the next check imports again
    return answer


def _import_and_list(gpus):
    # type: (str) -> dict[str, Any]
    """A real `import tensorflow`; with `gpus`, under that CUDA_VISIBLE_DEVICES (as the tasks run), the GPUs
    it sees and, when fewer, why (from its stderr, kept meanwhile)."""
    if gpus:
        os.environ["CUDA_VISIBLE_DEVICES"] = gpus  # before TensorFlow starts CUDA
    tee = TeeStderr()
    try:
        with tee if gpus else contextlib.nullcontext(tee):  # TF's stderr is read only for a GPU's cause
            import tensorflow as tf

            seen = visible_gpus(tf) if gpus else 0
        answer = {"version": tf.__version__}  # type: dict[str, Any]
        if gpus:
            answer["tf_gpus_seen"] = seen
            if seen < planned_gpus(gpus):
                answer["tf_gpu_cause"] = likely_cause(bool(tf.test.is_built_with_cuda()), tee.lines)
    except Exception as e:
        answer = {"error": "import tensorflow failed: %r" % (e,)}
    return answer


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


def report(args):
    # type: (dict[str, Any]) -> dict[str, object]
    r = {"python_version": sys.version.split()[0], "python_executable": sys.executable}  # type: dict[str, object]

    r.update(workdir_report(args["workdir"]))
    if args.get("skip_keras"):  # import TensorFlow as the built-in task would (training/task.py skip_eager_keras)
        os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
    r["tf_found"], r["tf_version"], tf_error, tf_gpus = tf_report(
        args["tf_distributions"], args["import_tf"], login_cache_dir(), args.get("gpus") or "")
    if tf_error:
        r["tf_error"] = tf_error
    r.update(tf_gpus)
    if args.get("checkpoint_dir"):  # shared_checkpoint_dir = true: is it one directory for every ps?
        r["checkpoint_dir_problem"] = try_write(args["checkpoint_dir"])
        r["checkpoint_dir_id"] = workdir_id(args["checkpoint_dir"]) if r["checkpoint_dir_problem"] is None else None
    r["gpus"], r["gpu_error"] = gpu_report()
    # [[port, address or ""], ...]: a TF port on every interface, a supervisor's on its own address
    r["ports"] = {str(port): port_problem(port, address) for port, address in args["ports"]}
    r["t_end"] = time.time()
    return r


if __name__ == "__main__":
    print(json.dumps(report(json.loads(sys.argv[1]))))
