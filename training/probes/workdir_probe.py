"""`check`'s look at a host's workdir: can `start` use it, and which other hosts share it?

Inlined into training/probes/host_probe.py's source when `check` sends it to a host (nothing of
tfcluster is installed there yet: orchestrator/run/inline_source.py). Hence: standard library only,
Python 3.6+, no `__future__` import, type comments.

- Usable: the workdir is created as `start` creates it (`mkdir -p`, private), then a file is written
  into it and removed. A workdir `start` could not create or write fails `check`, with the reason.
  `check` leaves the (empty) workdir behind, as `start` would.
- Shared: the workdir holds `WORKDIR_ID_FILE`, a random id created once (complete, then linked into
  place: two hosts racing on a shared filesystem both end up reading the winner's id). Hosts that
  report the same id share the directory; their machine ids (/etc/machine-id) tell one machine
  (several host entries on one machine) from a filesystem shared by several machines (NFS).
"""

import binascii
import os
from typing import Any  # noqa: F401 - named in type comments

WORKDIR_ID_FILE = ".tfcluster-workdir-id"
MACHINE_ID_FILES = ("/etc/machine-id", "/var/lib/dbus/machine-id")


def absolute_workdir(workdir):
    # type: (str) -> str
    """`~` and a relative path resolve against the login's home, as the start command's `cd` does."""
    wd = os.path.expanduser(workdir)
    return wd if os.path.isabs(wd) else os.path.join(os.path.expanduser("~"), wd)


def machine_id():
    # type: () -> str | None
    for path in MACHINE_ID_FILES:
        try:
            with open(path) as f:
                text = f.read().strip()
        except OSError:
            continue
        if text:
            return text
    return None


def _random_name(stem):
    # type: (str) -> str
    return "%s.%d.%s" % (stem, os.getpid(), binascii.hexlify(os.urandom(4)).decode())


def try_write(wd):
    # type: (str) -> str | None
    """Create the workdir as `start` would, write a file in it and remove it: None, or why not."""
    try:
        os.makedirs(wd, mode=0o700, exist_ok=True)
    except OSError as e:
        return "cannot create it: %s" % (e.strerror or e,)
    path = os.path.join(wd, _random_name(".tfcluster-check"))
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.write(fd, b"tfcluster check\n")
        finally:
            os.close(fd)
        os.unlink(path)
    except OSError as e:
        return "cannot write a file in it: %s" % (e.strerror or e,)
    return None


def workdir_id(wd):
    # type: (str) -> str | None
    """The workdir's id, created on first use: written whole to a private name, then hard-linked to
    WORKDIR_ID_FILE (a link fails if the name exists, atomically, on NFS too)."""
    marker = os.path.join(wd, WORKDIR_ID_FILE)
    if not os.path.exists(marker):
        tmp = os.path.join(wd, _random_name(WORKDIR_ID_FILE))
        try:
            with open(tmp, "w") as f:
                f.write(binascii.hexlify(os.urandom(16)).decode() + "\n")
            try:
                os.link(tmp, marker)
            except FileExistsError:
                pass  # another host made it first: theirs it is
            finally:
                os.unlink(tmp)
        except OSError:
            return None
    try:
        with open(marker) as f:
            return f.read().strip() or None
    except OSError:
        return None


def workdir_report(workdir):
    # type: (str) -> dict[str, Any]
    """The absolute workdir, whether `start` can use it (and why not), its id, this machine's id and
    free bytes."""
    wd = absolute_workdir(workdir)
    problem = try_write(wd)
    free = None
    try:
        st = os.statvfs(wd if problem is None else os.path.dirname(wd))
        free = st.f_bavail * st.f_frsize
    except OSError:
        pass
    return {"workdir": wd, "workdir_exists": os.path.isdir(wd), "workdir_writable": problem is None,
            "workdir_problem": problem, "workdir_id": workdir_id(wd) if problem is None else None,
            "machine_id": machine_id(), "disk_free_bytes": free}
