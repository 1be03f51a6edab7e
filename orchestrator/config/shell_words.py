"""A ShellScanner that also follows the words of the simple command being read at each nesting level
(the command text, and each `$(...)` or backticks in it), so that orchestrator/config/command.py can refuse
a placeholder whose value a program would read again as shell code (orchestrator/config/reparse.py). Pure.

Words end at an unquoted blank; `;`, `&`, `|`, a newline and parentheses end the simple command; a
redirection's target is not an argument. A `$(...)` or backticks inside a word make a new level: a
placeholder there is refused when the word it is part of, at any level, is re-parsed (`sh -c "$(echo
{job})"` hands the value to the inner shell too). A here-document's body is refused when the command it is
fed to reads it as a script (`sh <<EOF`); the `<<` decides that from the command's words before it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from orchestrator.config.reparse import Word, reparsed, stdin_reparsed
from orchestrator.config.shell_scan import ShellScanner

COMMAND_LEVELS = ("", "`", "$(")  # contexts whose text is commands (ShellScanner's names)
UNFOLLOWED = ("<<", "<<'", "<<w", "#")  # a here-document's body or delimiter, a comment: no command words


@dataclass
class _Command:
    """The simple command being read at one level: its words so far and the word being read."""

    words: list[Word] = field(default_factory=list)
    current: Word = field(default_factory=Word)
    target: str = "arg"  # what the word being read is: an argument, a redirection's file, a here-string
    last: str = ""

    def end_word(self) -> None:
        if not (self.current.raw or self.current.opaque):
            return
        if self.target == "arg":
            self.words.append(self.current)
        self.current, self.target = Word(), "arg"

    def end_command(self) -> None:
        self.end_word()
        self.words, self.current, self.target = [], Word(), "arg"

    def read(self, chunk: str) -> None:
        """`chunk`, read unquoted and unescaped at this level."""
        if chunk in (" ", "\t"):
            self.end_word()
        elif chunk == "&" and self.last and self.last in "<>":
            self.current.raw += chunk  # >&2
        elif chunk[0] in "\n;&|()":
            self.end_command()
        elif chunk == "<<<":
            self.end_word()
            self.target = "herestring"
        elif chunk in ("<", ">"):
            if self.current.raw.isdigit() and not self.current.opaque:
                self.current = Word()  # 2>: a file descriptor, not a word
            self.end_word()
            self.target = "redirect"
        else:
            self.current.raw += chunk
        self.last = chunk[-1]

    def reparsed(self) -> str | None:
        if self.target == "herestring":
            return stdin_reparsed(self.words)
        if self.target == "redirect":
            return None
        return reparsed([*self.words, self.current], len(self.words))


class CommandScanner(ShellScanner):
    def __init__(self) -> None:
        super().__init__()
        self.levels: list[_Command] = [_Command()]
        self._fed_to_shell: dict[int, str | None] = {}  # id of a queued HereDoc -> why its body is code

    def feed(self, text: str) -> None:
        i = 0
        while i < len(text):
            state, escaped = self.context, self.escaped
            used = self._one(text, i)
            if used:
                self._follow(text[i : i + used], state, escaped)
            i += used

    def placeholder(self) -> None:
        super().placeholder()
        if self.context not in UNFOLLOWED:
            self.levels[-1].current.opaque = True

    def reparsed_here(self) -> str | None:
        """Why a placeholder here would be read again as shell code, or None."""
        if self.context == "#":
            return None
        for doc in self.bodies:
            if why := self._fed_to_shell.get(id(doc)):
                return f"{why} (a here-document)"
        for level in self.levels:
            if why := level.reparsed():
                return why
        return None

    def _follow(self, chunk: str, state: str, escaped: bool) -> None:
        """Keep the levels' words in step with what the scanner just read (`chunk`, from `state`)."""
        levels = sum(1 for s in self.stack if s in COMMAND_LEVELS)
        if levels > len(self.levels):  # a substitution opened, inside the word being read
            if state not in UNFOLLOWED:
                self.levels[-1].current.raw += chunk
                self.levels[-1].current.opaque = True
            self.levels.append(_Command())
        elif levels < len(self.levels):  # it closed: the word around it goes on
            self.levels.pop()
            if self.context not in UNFOLLOWED:
                self.levels[-1].current.raw += chunk
        elif state in UNFOLLOWED:
            if state == "<<w" and self.context in ("<<", "<<'"):
                self.levels[-1].end_command()  # the body starts: the command's line has ended
        elif state not in COMMAND_LEVELS or escaped:
            self.levels[-1].current.raw += chunk  # quoted, or after a backslash: part of the word
        else:
            command = self.levels[-1]
            if chunk in ("<<", "<<-"):
                command.end_word()
                self._fed_to_shell[id(self.pending[-1])] = stdin_reparsed(command.words)
                command.last = "<"
            else:
                command.read(chunk)
