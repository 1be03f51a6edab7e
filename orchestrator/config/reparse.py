"""Which word of a simple command a program reads again as shell code: a nested shell's string. Pure.

A placeholder's reference is inert for the shell that runs the command (orchestrator/config/command.py),
but the value it expands to is then plain text in an argument; a program that parses that argument as a
shell script again would run whatever quotes, `;` or `$(...)` the value holds. `reparsed(words, at)`
says when the word at index `at` of a simple command is such a string, and why (None: it is not):

    sh|bash|dash|ash|ksh|mksh|zsh -c SCRIPT     the script (the words after it are $0, $1...: inert)
    eval WORD...                                every word
    su|runuser -c CMD (--command=CMD)           the command (a shell of the target user runs it)
    ssh [options] DESTINATION WORD...           every word after the destination (the remote shell)

`stdin_reparsed(words)`: a here-document or here-string fed to the command is read as a script
(`sh <<EOF`, `bash -s`, `ssh host` with no command, `su user`).

The program is the command word, after `VAR=value` assignments and wrappers that run their arguments as a
command (`busybox sh`, `sudo -u u`, `env`, `nohup`, `timeout 10`, `xargs`...). A word holding a placeholder
or a substitution is never taken for the program (what it runs is not known here).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

SHELLS = ("sh", "bash", "dash", "ash", "ksh", "mksh", "zsh", "hush")
SU = ("su", "runuser")
WRAPPERS = ("busybox", "sudo", "doas", "env", "nohup", "nice", "ionice", "timeout", "stdbuf", "setsid", "xargs",
            "exec", "command", "builtin", "time", "chrt", "taskset", "numactl", "srun", "mpirun", "mpiexec",
            "unbuffer", "!", "if", "then", "else", "elif", "while", "until", "do", "{")
SHELL_OPTIONS_WITH_ARGUMENT = ("o", "O")  # bash -o pipefail -c '...'
SHELL_LONG_WITH_ARGUMENT = ("--rcfile", "--init-file")
SSH_OPTIONS_WITH_ARGUMENT = "BbcDEeFIiJLlmOoPpQRSWw"  # ssh(1)
ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


@dataclass
class Word:
    """A word of a simple command as written (quotes kept); `opaque` when a placeholder or a substitution
    is in it: its value is not known here."""

    raw: str = ""
    opaque: bool = False

    @property
    def text(self) -> str:
        """The word with its quotes and backslashes removed (enough to recognise a program or an option)."""
        return re.sub(r"[\"'\\]", "", self.raw)

    @property
    def literal(self) -> str | None:
        return None if self.opaque else self.text


def _program(words: list[Word]) -> int | None:
    """The index of the program that runs, past assignments and wrappers (and their options); None when it
    is not known or is not one that re-parses."""
    after_wrapper, previous_option = False, False
    for i, word in enumerate(words):
        text = word.literal
        if text is None:
            if not after_wrapper:
                return None
            previous_option = False
            continue
        name = text.rsplit("/", 1)[-1]
        if name in SHELLS or name in SU or name in ("eval", "ssh"):
            return i
        if name in WRAPPERS:
            after_wrapper, previous_option = True, False
        elif ASSIGNMENT.match(text) or (after_wrapper and (text.startswith("-") or previous_option
                                                          or not re.search(r"[A-Za-z]", text))):
            previous_option = text.startswith("-") and "=" not in text  # `-u bob`: bob is the option's
        else:
            return None  # a program that does not re-parse its arguments
    return None


def _shell_script(words: list[Word], at: int) -> tuple[bool, bool, bool]:
    """For a shell's arguments `words` (after its name) up to index `at`: (-c given, -s given, an operand
    before `at`)."""
    c_flag = s_flag = False
    i = 0
    while i < at:
        text = words[i].literal
        if text in ("-", "--"):  # the end of the options: the next word is the first operand
            return c_flag, s_flag, i + 1 < at
        if text is None or not text.startswith(("-", "+")):
            return c_flag, s_flag, True  # the first operand: a script file, or -c's script
        if text in SHELL_LONG_WITH_ARGUMENT:
            i += 1
        elif not text.startswith("--"):
            flags = text[1:]
            c_flag = c_flag or (text[0] == "-" and "c" in flags)
            s_flag = s_flag or (text[0] == "-" and "s" in flags)
            if any(o in flags for o in SHELL_OPTIONS_WITH_ARGUMENT):
                i += 1
        i += 1
    return c_flag, s_flag, False


def _su_command(words: list[Word], at: int) -> bool:
    """True when word `at` of su's arguments `words` is the command of `-c`/`--command`."""
    previous = words[at - 1].literal if at > 0 else None
    if previous is not None and (previous in ("--command", "--session-command")
                                 or (re.match(r"^-[A-Za-z]*c$", previous) is not None)):
        return True
    text = words[at].text
    return text.startswith(("--command=", "--session-command=")) or re.match(r"^-[A-Za-z]*c.", text) is not None


def _ssh_destination(words: list[Word]) -> int | None:
    """The index of the destination among ssh's arguments `words`, past its options."""
    i = 0
    while i < len(words):
        text = words[i].literal
        if text is None or not text.startswith("-") or text == "-":
            return i
        if text == "--":
            return i + 1 if i + 1 < len(words) else None
        flags = text[1:]
        takes = next((k for k, f in enumerate(flags) if f in SSH_OPTIONS_WITH_ARGUMENT), None)
        i += 2 if takes == len(flags) - 1 else 1  # `-p 22`; `-p22` holds its argument
    return None


def reparsed(words: list[Word], at: int) -> str | None:
    """Why word `at` of the simple command `words` is read again as shell code, or None."""
    p = _program(words[:at])
    if p is None:
        return None
    name, args, arg_at = words[p].text.rsplit("/", 1)[-1], words[p + 1 :], at - p - 1
    if name == "eval":
        return "eval reads its arguments again as shell code"
    if name in SHELLS:
        c_flag, _s, operand_before = _shell_script(args, arg_at)
        if c_flag and not operand_before:
            return f"`{name} -c` reads its script again as shell code"
        return None
    if name in SU:
        return f"`{name} -c` hands its command to a shell that reads it again" if _su_command(args, arg_at) else None
    destination = _ssh_destination(args[:arg_at])
    if destination is not None and arg_at > destination:
        return "ssh hands its command to the remote shell, which reads it again"
    return None


def stdin_reparsed(words: list[Word]) -> str | None:
    """Why what the simple command `words` reads on stdin (a here-document, a here-string) is read as
    shell code, or None."""
    p = _program(words)
    if p is None:
        return None
    name, args = words[p].text.rsplit("/", 1)[-1], words[p + 1 :]
    if name in SHELLS:
        c_flag, s_flag, operand = _shell_script(args, len(args))
        return f"`{name}` reads its script from it" if s_flag or not (c_flag or operand) else None
    if name in SU:
        command = any(_su_command(args, i) for i in range(len(args)))
        return None if command else f"`{name}` starts a shell that reads it"
    if name == "ssh":
        destination = _ssh_destination(args)
        if destination is None:
            return None
        remote = args[destination + 1 :]
        if not remote:
            return "ssh with no command gives it to the remote shell"
        return stdin_reparsed(remote)
    return None
