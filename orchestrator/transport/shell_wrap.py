"""The POSIX wrapper every remote command runs in over SSH, whichever client carries it (Paramiko's
SSHTransport, the system's `ssh` in OpenSSHTransport), and the script that kills a command's process
group. Stdlib only: importing it never imports Paramiko.

`sh_wrap` runs a command under /bin/sh and reports its pid first on stderr (`split_pid_marker` strips it);
`kill_script` SIGKILLs that pid's group, only while the pid still carries the session's tag.
"""

from __future__ import annotations

import secrets
import shlex

from orchestrator.transport.base import login_wrap

PID_MARKER = b"__tfcluster_pid__ "
SESSION_ENV = "TFCLUSTER_SSH_SESSION"  # a command's session tag (sh_wrap, kill_script)


def sh_wrap(command: str, login_shell: bool = False, tag: str = "") -> str:
    """Run under /bin/sh whatever the user's login shell is (fish, csh...): quoting rules stay POSIX.
    With `login_shell`, under `$SHELL -l` first (base.login_wrap), then /bin/sh.

    The first stderr line reports the session's pid (sshd makes it a process-group leader), so a
    command that outlives its timeout can be killed with its children. It is stripped from stderr.
    `tag` (new_session_tag) goes into the session's environment: `kill_script` kills that pid only while
    it still carries it, never a process that got the pid after the session ended."""
    # The command runs in this same shell (no second `sh -c`): one process less per command.
    inner = f"echo \"{PID_MARKER.decode()}$$\" >&2\n{login_wrap(command) if login_shell else command}"
    wrapped = "/bin/sh -c " + shlex.quote(inner)
    # `env` (not `VAR=value cmd`): csh and fish login shells run it too. An exported variable survives the
    # shell's exec of its last command, so a timed-out command that sh exec'd still carries it.
    return f"env {SESSION_ENV}={tag} {wrapped}" if tag else wrapped


def new_session_tag() -> str:
    return secrets.token_hex(8)


def kill_script(pid: int, tag: str) -> str:
    """SIGKILL a session's process group, in sh, without ever hitting a reused pid (pid_max is 32768 on
    many hosts: a busy one hands a pid out again within seconds). While the pid is in use, it is the
    session's only if its environment carries `tag`. Once it is gone, a group by its number is still the
    session's: Linux never hands out a pid that is still some group's id."""
    if not (tag.isascii() and tag.isalnum()):  # it goes into a shell: letters and digits only
        raise ValueError(f"not a session tag: {tag!r}")
    pid = int(pid)
    return (f"if [ -e /proc/{pid} ]; then "
            f"tr '\\000' '\\n' < /proc/{pid}/environ 2>/dev/null | grep -qxF {SESSION_ENV}={tag} && "
            f"{{ kill -s KILL -- -{pid} 2>/dev/null || kill -s KILL {pid} 2>/dev/null; }}; "
            f"else kill -s KILL -- -{pid} 2>/dev/null; fi; true")


def split_pid_marker(err: bytes | bytearray) -> tuple[int | None, bytes]:
    """(pid, stderr without the marker line) once the marker line is complete, else (None, err)."""
    if err.startswith(PID_MARKER) and b"\n" in err:
        line, _, rest = bytes(err).partition(b"\n")
        value = line[len(PID_MARKER) :].strip()
        return (int(value) if value.isdigit() else None), rest
    return None, bytes(err)


