"""Where the system programs the tests start (sshd, the Slurm daemons, munged) are looked for: the first
executable in the program family's override variable when it is set (TFCLUSTER_OPENSSH_PATH,
TFCLUSTER_SLURM_PATH), else in $PATH then /usr/sbin, /usr/local/sbin, /sbin (where distributions put
daemons; not on a normal user's PATH on Debian). scripts/provision decides what to install by the same
rule (tests/unit/test_provision.py checks that both find the same programs).
"""

from __future__ import annotations

import os

SBIN_DIRS = ("/usr/sbin", "/usr/local/sbin", "/sbin")


def search_path(override_env: str) -> str:
    """$`override_env` when it is set (even empty), else $PATH then the sbin directories."""
    override = os.environ.get(override_env)
    if override is not None:
        return override
    return os.pathsep.join([os.environ.get("PATH", ""), *SBIN_DIRS])


def find_tool(name: str, override_env: str) -> str | None:
    """The first executable file `name` in search_path(override_env) (empty entries skipped), or None."""
    for directory in search_path(override_env).split(os.pathsep):
        candidate = os.path.join(directory, name)
        if directory and os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None
