"""`SrunTransport`: the Transport protocol for a node of a running Slurm job, where SSH to compute nodes
may not be allowed: every command is a step that joins the job, `srun --jobid=J --overlap -w NODE -N1 -n1
/bin/sh -c <command>`, run by a shell transport of the machine where Slurm's clients are: this one
(LocalTransport) or the `[slurm] login` host (SSHTransport, with the [ssh] settings). stdin and stdout are
the step's, so a conversation (start's), a stream (the agent, `logs -f`) and a plain command work as over
SSH; the command starts in the home directory, as an SSH command does.

`--overlap` because the job's own step (the supervisors) holds every CPU of its nodes; without it a step
from outside waits ("Requested nodes are busy"). A step outlives an srun that is killed with SIGKILL (as
the shell transports end a command they close or time out: measured on Slurm 22.05, a step whose task
writes nothing ran on), so every step is named (`--job-name=tfcluster-<hex>`), and closing one that still
runs, or a timeout, also cancels the step by that name (one more command, only then). srun's own failures
(the job has ended, is not running yet, the step could not start) are HostErrors naming the node, never a
command result: a status of an ended job must not read as a failed probe.
"""

from __future__ import annotations

import contextlib
import re
import secrets
import shlex
from collections.abc import Iterator, Mapping, Sequence

from orchestrator.errors import HostError
from orchestrator.transport.base import (
    CommandResult,
    LineStream,
    Session,
    ShellTransport,
    Transport,
    shell_command,
)

SRUN_ERROR = re.compile(r"srun: (?:error|fatal): (.*)")
GONE = ("has expired", "Invalid job id", "already completed", "is pending execution", "Job has already finished")
STEP_CANCELLED = re.compile(r"STEP \S+ ON \S+ CANCELLED|Job step aborted")
# What srun adds after a command that exited non-zero or by a signal, even with --quiet:
# "srun: error: n2: task 0: Exited with exit code 3". Not the command's words: dropped from its stderr.
TASK_END = re.compile(r"^srun: error: \S+: tasks? [0-9,-]+: .*(\n|$)", re.M)
CANCEL_TIMEOUT_S = 10.0


class SrunTransport(ShellTransport):
    def __init__(self, host: str, node: str, job_id: str, shell: Transport) -> None:
        self.host = host  # the node's name in the plan (its Slurm name)
        self.node = node
        self.job_id = job_id
        self.shell = shell  # where srun runs: this machine, or the login host

    def _srun(self, command: str) -> tuple[list[str], str]:
        """The step's argv (for the shell transport) and its name."""
        name = f"tfcluster-{secrets.token_hex(4)}"
        script = f'cd "$HOME" 2>/dev/null || cd /\n{command}'
        return ["srun", f"--jobid={self.job_id}", "--overlap", f"--nodelist={self.node}", "--nodes=1", "--ntasks=1",
                "--chdir=/", "--quiet", f"--job-name={name}", "/bin/sh", "-c", script], name

    def _run_shell(self, command: str, timeout: float | None, stdin: bytes | None) -> CommandResult:
        argv, name = self._srun(command)
        try:
            result = self.shell.run(argv, timeout=timeout, stdin=stdin)
        except HostError as exc:
            if exc.reason == "timeout":
                self.cancel_step(name)
            raise
        stderr = self.command_stderr(result.exit_code, result.stderr)
        return CommandResult(self.host, command, result.exit_code, result.stdout, stderr, result.duration_s)

    def command_stderr(self, exit_code: int | None, stderr: str) -> str:
        """srun's own failure as a HostError: the step was cancelled under the command (the job ended while
        it ran), or it never started (the job has ended or not started yet: srun speaks first on stderr,
        `srun: error: ...`). Otherwise the command's own stderr, without srun's task-end lines."""
        if not exit_code:
            return stderr
        if STEP_CANCELLED.search(stderr):
            raise HostError(self.host, "lost", f"the step on {self.node} was cancelled (Slurm job {self.job_id} ended?)")
        own = TASK_END.sub("", stderr)
        first = SRUN_ERROR.match(own.lstrip())
        if first is not None:
            said = first.group(1)
            what = (f"Slurm job {self.job_id} is not running" if any(word in said for word in GONE)
                    else f"cannot start a step on {self.node}")
            raise HostError(self.host, "unreachable", f"{what}: {said}")
        return own

    def cancel_step(self, name: str) -> None:
        """Cancel this transport's step named `name`, if it still runs (its srun was killed)."""
        script = (f"squeue -h -s -j {shlex.quote(self.job_id)} -o '%i %j' | while read -r step step_name; do "
                  f'[ "$step_name" = {shlex.quote(name)} ] && scancel "$step"; done; true')
        with contextlib.suppress(HostError):
            self.shell.run_shell(script, timeout=CANCEL_TIMEOUT_S)

    def stream(self, argv: Sequence[str], *, env: Mapping[str, str] | None = None, cwd: str | None = None) -> LineStream:
        step, name = self._srun(shell_command(argv, env=env, cwd=cwd))
        return StepStream(self, self.shell.stream(step), name)

    def open_session(self, command: str) -> Session:
        step, name = self._srun(command)
        return StepSession(self, self.shell.open_session(shell_command(step)), name)

    def close(self) -> None:
        self.shell.close()


class _Step:
    """A step's command whose close also cancels the step when it still runs."""

    def __init__(self, transport: SrunTransport, inner: LineStream | Session, name: str) -> None:
        self._transport = transport
        self._inner = inner
        self._name = name

    @property
    def exit_code(self) -> int | None:
        return self._inner.exit_code

    def close(self) -> None:
        running = self._inner.exit_code is None
        self._inner.close()
        if running:
            self._transport.cancel_step(self._name)


class StepStream(_Step):
    """A LineStream (the agent, `logs -f`) over one step."""

    def __init__(self, transport: SrunTransport, inner: LineStream, name: str) -> None:
        super().__init__(transport, inner, name)
        self._stream = inner

    def lines(self) -> Iterator[str]:
        return self._stream.lines()


class StepSession(_Step):
    """A Session (start's conversation) over one step."""

    def __init__(self, transport: SrunTransport, inner: Session, name: str) -> None:
        super().__init__(transport, inner, name)
        self._session = inner
        self.host = transport.host

    def send(self, data: bytes) -> None:
        self._session.send(data)

    def read_line(self, timeout: float) -> str | None:
        return self._session.read_line(timeout)

    def close_input(self) -> None:
        self._session.close_input()

    @property
    def stderr_tail(self) -> str:
        return TASK_END.sub("", self._session.stderr_tail)
