"""The user's `command` template -> the shell string each task runs, with every placeholder inert.

A placeholder is never pasted into the shell text. Each value goes into the task's environment as
`TFCLUSTER_ARG_<NAME>` (set by the supervisor through posix_spawn: no shell ever parses it) and the
template gets a reference to that variable, written for the quoting context the user put the
placeholder in:

    bare            {python} train.py       ->  "${TFCLUSTER_ARG_PYTHON}" train.py
    double quotes   "python is {python}"    ->  "python is ${TFCLUSTER_ARG_PYTHON}"
    single quotes   'python is {python}'    ->  'python is '"${TFCLUSTER_ARG_PYTHON}"''
    $( ... ) and ` ... ` start a new, unquoted context, as they do for the shell.

The shell expands a quoted parameter once and never re-reads the result, so quotes, `$(...)`,
backticks, newlines or globs in a value reach the program as plain characters. A placeholder where
no reference can be written faithfully (inside `${...}` or `$'...'`) is a one-line error.
"""

from __future__ import annotations

import difflib
import string
from collections.abc import Mapping

from orchestrator.errors import ConfigError

COMMAND_PLACEHOLDERS = ("job", "task", "ps_hosts", "worker_hosts", "chief_host", "python", "host")
ARG_ENV_PREFIX = "TFCLUSTER_ARG_"
KEY = "training.command"


def arg_env_name(placeholder: str) -> str:
    return ARG_ENV_PREFIX + placeholder.upper()


def _braced(name: str) -> str:
    return "{" + name + "}"


class _Scanner:
    """Where the shell is, quoting-wise, after each piece of literal text of the template.

    States on a stack: "" (unquoted), "'" , '"', "`" (inside backticks), "$(" (command substitution),
    "${" (parameter expansion), "$'" (ANSI-C quoting). Enough of the POSIX shell's grammar to place a
    reference; anything it cannot follow makes the placeholder an error, never a guess."""

    def __init__(self) -> None:
        self.stack: list[str] = [""]
        self.escaped = False

    @property
    def state(self) -> str:
        return self.stack[-1]

    def feed(self, text: str) -> None:
        i = 0
        while i < len(text):
            c, nxt = text[i], text[i + 1 : i + 2]
            if self.escaped:
                self.escaped = False
            elif self.state in ("'", "$'"):
                self._quoted_literally(c)
            elif c == "\\":
                self.escaped = True
            elif (c == "$" and nxt in ("(", "{")) or (c == "$" and nxt == "'" and self.state != '"'):
                self.stack.append("$" + nxt)
                i += 1
            elif self.state == '"':
                self._double_quoted(c)
            else:
                self._unquoted(c)
            i += 1

    def _quoted_literally(self, c: str) -> None:
        """Inside '...' nothing is special but the closing quote; inside $'...' backslash escapes too."""
        if c == "\\" and self.state == "$'":
            self.escaped = True
        elif c == "'":
            self.stack.pop()

    def _double_quoted(self, c: str) -> None:
        if c == '"':
            self.stack.pop()
        elif c == "`":
            self.stack.append("`")

    def _unquoted(self, c: str) -> None:
        """Unquoted text, or inside `...`, $(...) or ${...}, where quotes open again."""
        state = self.state
        if c in ("'", '"'):
            self.stack.append(c)
        elif c == "`":
            if state == "`":
                self.stack.pop()
            else:
                self.stack.append("`")
        elif (c == ")" and state == "$(") or (c == "}" and state == "${"):
            self.stack.pop()
        elif c == "(" and state == "$(":
            self.stack.append("$(")  # a nested group: its ")" must not close the substitution

    def reference(self, name: str, source: str) -> str:
        var = "${" + arg_env_name(name) + "}"
        state = self.state
        if state == '"':
            return var
        if state == "'":
            return "'\"" + var + "\"'"
        if state in ("", "`", "$("):
            return '"' + var + '"'
        where = "inside ${...}" if state == "${" else "inside $'...'"
        raise ConfigError(source, KEY, f"placeholder {_braced(name)} {where}: its value cannot be quoted "
                                       "there; use it outside (e.g. in double quotes)")


def fill_command(template: str, source: str = "hosts.toml") -> str:
    """The shell text of `template` with every placeholder replaced by a quoted variable reference.
    Raises ConfigError for an unknown placeholder, a conversion, unbalanced braces or an unquotable spot."""
    check_command_template(template, source)
    scanner = _Scanner()
    out: list[str] = []
    for literal, name, _spec, _conversion in string.Formatter().parse(template):
        out.append(literal)
        scanner.feed(literal)
        if name is not None:
            out.append(scanner.reference(name, source))
    return "".join(out)


def command_env(values: Mapping[str, str]) -> dict[str, str]:
    """The task's TFCLUSTER_ARG_* variables for the placeholders' values."""
    return {arg_env_name(k): v for k, v in values.items()}


def check_command_template(template: str, source: str) -> None:
    """The user's command may only use COMMAND_PLACEHOLDERS, each plainly (`{task}`, not `{task!r}`)."""
    try:
        fields = [(name, spec, conversion) for _, name, spec, conversion in string.Formatter().parse(template)]
    except ValueError as exc:  # unbalanced braces
        raise ConfigError(
            source, KEY, f"{exc}: write {{{{ and }}}} for a literal brace in the command"
        ) from None
    for name, spec, conversion in fields:
        if name is None:
            continue
        if name not in COMMAND_PLACEHOLDERS:
            close = difflib.get_close_matches(name, COMMAND_PLACEHOLDERS, n=1, cutoff=0.5)
            raise ConfigError(
                source, KEY,
                f"unknown placeholder {{{name}}}; known: " + ", ".join(_braced(p) for p in COMMAND_PLACEHOLDERS),
                suggestion=_braced(close[0]) if close else None,
            )
        if conversion is not None or spec:
            raise ConfigError(
                source, KEY,
                f"placeholder {{{name}{'!' + conversion if conversion else ''}{':' + spec if spec else ''}}}: "
                "conversions and formats are not allowed, the value is passed as it is",
                suggestion=_braced(name),
            )
