"""The user's `command` template -> the shell string each task runs, with every placeholder inert.

A placeholder is never pasted into the shell text. Each value goes into the task's environment as
`TFCLUSTER_ARG_<NAME>` (set by the supervisor through posix_spawn: no shell ever parses it) and the
template gets a reference to that variable, written for the context the user put the placeholder in
(orchestrator/config/shell_scan.py follows the quoting):

    bare            {python} train.py       ->  "${TFCLUSTER_ARG_PYTHON}" train.py
    double quotes   "python is {python}"    ->  "python is ${TFCLUSTER_ARG_PYTHON}"
    single quotes   'python is {python}'    ->  'python is '"${TFCLUSTER_ARG_PYTHON}"''
    $( ... ) and ` ... ` start a new, unquoted context, as they do for the shell
    here-document   cat <<EOF ... {job} ... ->  ... ${TFCLUSTER_ARG_JOB} ...   (quotes there are literal)
    arithmetic      $(( {task} + 41 ))      ->  $(( ${TFCLUSTER_ARG_TASK%%[!0-9]*} + 41 ))

The shell expands a parameter once and never re-reads the result, so quotes, `$(...)`, backticks,
newlines or globs in a value reach the program as plain characters, under dash, bash (also as /bin/sh)
and busybox sh alike. Arithmetic is the exception (bash evaluates a value there as an expression, and
runs a `$(...)` in it): only `{task}`, a number, may appear there, and only its digits get in. A
placeholder where no reference holds is a one-line error naming the context: inside `${...}`, `$'...'`,
a quoted here-document (nothing is expanded there) or its delimiter, bash's `[[ ... ]]` (its -eq
evaluates values as arithmetic), another placeholder than `{task}` in arithmetic, after a backslash.
So is a placeholder in a string that a program reads again as shell code, where the value would no longer
be inert (`sh -c '... {job}'`, `eval`, `su -c`, `ssh host ...`, `sh <<EOF`: orchestrator/config/reparse.py):
the inner shell can read `"$TFCLUSTER_ARG_JOB"` itself, or get the value as an argument (`"$1"`).
"""

from __future__ import annotations

import difflib
import string

from orchestrator.config.shell_scan import ShellScanner
from orchestrator.config.shell_words import CommandScanner
from orchestrator.errors import ConfigError

COMMAND_PLACEHOLDERS = ("job", "task", "ps_hosts", "worker_hosts", "chief_host", "python", "host")
NUMERIC_PLACEHOLDERS = ("task",)  # always a number: the only ones arithmetic may use
ARG_ENV_PREFIX = "TFCLUSTER_ARG_"
KEY = "training.command"


def arg_env_name(placeholder: str) -> str:
    return ARG_ENV_PREFIX + placeholder.upper()


def _braced(name: str) -> str:
    return "{" + name + "}"


def _reference(scan: ShellScanner, name: str, source: str) -> str:
    """The text standing for placeholder `name` where `scan` is, or a one-line ConfigError naming the
    context where no reference holds in every POSIX shell (dash, bash as /bin/sh, busybox sh)."""
    var = "${" + arg_env_name(name) + "}"
    state = scan.context
    if scan.escaped:
        raise ConfigError(source, KEY, f"placeholder {_braced(name)} after a backslash: the backslash would quote "
                                       "the reference, not the value (every value arrives exactly as it is): "
                                       "remove the backslash")
    if state in ('"', "<<"):
        return var  # expanded once, never re-read: quotes would be literal in a here-document
    if state == "'":
        return "'\"" + var + "\"'"
    if state in ("", "`", "$(", "#"):
        return '"' + var + '"'
    if state == "$((" and name in NUMERIC_PLACEHOLDERS:
        # bash evaluates a variable's value as an arithmetic expression (running any $(...) in it):
        # only its leading digits reach the expression, which for a task index is all of it.
        return "${" + arg_env_name(name) + "%%[!0-9]*}"
    why = {"$((": f"only {', '.join(_braced(p) for p in NUMERIC_PLACEHOLDERS)} (a number) can be used in arithmetic",
           "[[": "bash evaluates its -eq (and like) operands as arithmetic, running a $(...) in a value: use "
                 "[ ... ]"}.get(state, "its value cannot be quoted there")
    raise ConfigError(source, KEY, f"placeholder {_braced(name)} inside {scan.name()}: {why}; use it outside "
                                   "(e.g. in double quotes)")


def _not_reparsed(scan: CommandScanner, name: str, source: str) -> None:
    """A one-line ConfigError when a program would read the placeholder's value again as shell code."""
    why = scan.reparsed_here()
    if why is None:
        return
    var = arg_env_name(name)
    hint = (f"pass the value another way (ssh does not carry {var})" if "ssh" in why else
            f"write '\"${var}\"' in single quotes there (the task's environment holds it)"
            + (f", or pass {_braced(name)} as an argument after the script (\"$1\")" if "its script again" in why else ""))
    raise ConfigError(source, KEY, f"placeholder {_braced(name)} inside a nested shell's string: {why}, so its "
                                   f"value would run as code; {hint}")


def fill_command(template: str, source: str = "hosts.toml") -> str:
    """The shell text of `template` with every placeholder replaced by a quoted variable reference.
    Raises ConfigError for an unknown placeholder, a conversion, unbalanced braces or an unquotable spot."""
    check_command_template(template, source)
    scanner = CommandScanner()
    out: list[str] = []
    for literal, name, _spec, _conversion in string.Formatter().parse(template):
        out.append(literal)
        scanner.feed(literal)
        if name is not None:
            _not_reparsed(scanner, name, source)
            out.append(_reference(scanner, name, source))
            scanner.placeholder()
    return "".join(out)


def placeholder_vars(template: str) -> dict[str, str]:
    """Each placeholder `template` uses -> the variable its reference reads: only those go into a task's
    environment ({ps_hosts} in every task's env would make the plan O(hosts^2))."""
    names = [name for _, name, _, _ in string.Formatter().parse(template) if name is not None]
    return {name: arg_env_name(name) for name in names}


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
