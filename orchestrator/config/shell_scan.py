"""Where a POSIX shell is, quoting-wise, at each point of a command text: enough of the grammar that
orchestrator/config/command.py can write a placeholder's reference for the context the user put it in,
or refuse it. Pure.

Contexts, on a stack (`ShellScanner.context`):
    ""     unquoted               "'"    '...'              '"'    "..."
    "`"    `...`                  "$("   $(...)             "${"   ${...}
    "$'"   $'...' (bash)          "$(("  $((...)) arithmetic; also bash's ((...)) command
    "[["   bash's [[ ... ]]       "<<"   an unquoted here-document's body; "<<'" a quoted one's
    "<<w"  a here-document's delimiter word, being read       "#"    a comment, to the end of its line
`escaped` is true right after an unquoted (or double-quoted, or here-document) backslash.

Here-documents: `<<` or `<<-` and a word queue a body that starts at the next unquoted newline and
ends at a line equal to the word (its quotes removed; leading tabs stripped with `<<-`). A word with
any quote or backslash makes the body literal. A placeholder on a body line means that line is not the
delimiter. Anything the scanner cannot follow is for the caller to refuse, never to guess.
"""

from __future__ import annotations

from dataclasses import dataclass

OPENS_COMMAND = ("", "`", "$(", "[[")  # where quotes, heredocs and substitutions start as at top level
NAMES = {
    "": "unquoted", "'": "single quotes", '"': "double quotes", "`": "backticks", "$(": "$(...)",
    "${": "${...}", "$'": "$'...'", "$((": "arithmetic $((...))", "[[": "bash's [[ ... ]]",
    "<<": "a here-document", "<<'": "a quoted here-document (nothing is expanded there)",
    "<<w": "a here-document's delimiter", "#": "a comment",
}
WORD_END = " \t\n;&|<>()"


@dataclass
class HereDoc:
    delimiter: str = ""
    strip_tabs: bool = False
    quoted: bool = False


class ShellScanner:
    def __init__(self) -> None:
        self.stack: list[str] = [""]
        self.escaped = False
        self.depth: list[int] = []  # open parentheses inside each arithmetic context
        self.pending: list[HereDoc] = []  # heredocs whose body starts at the next newline
        self.bodies: list[HereDoc] = []  # the heredoc whose body is being read (top of the stack)
        self.line = ""  # the current heredoc body line so far
        self.line_filled = False  # a placeholder is on it: it cannot be the delimiter
        self.word_quote = ""  # inside a delimiter word: the open quote

    @property
    def context(self) -> str:
        return self.stack[-1]

    def name(self) -> str:
        return NAMES[self.context]

    def placeholder(self) -> None:
        """A placeholder's reference goes here: its text is not shell syntax to follow."""
        self.line_filled = True

    def feed(self, text: str) -> None:
        i = 0
        while i < len(text):
            i += self._one(text, i)

    def _one(self, text: str, i: int) -> int:
        """Consume text[i] (and what it starts); return how many characters were used (0: text[i] ended
        a comment and is read again in the context around it)."""
        c, ahead = text[i], text[i + 1 : i + 3]
        state = self.context
        if state in ("<<", "<<'") and not self.escaped and self._body_line(c):
            return 1
        if self.escaped:
            self.escaped = False
        elif state == "#":
            if c == "\n":
                self.stack.pop()
                return 0
        elif state == "<<w":
            self._word(c)
        elif state in ("'", "$'", "<<'"):
            self._literal(c)
        elif c == "\\":
            self.escaped = True
        elif c == "$" and ahead[:2] == "((":
            self._push("$((")
            return 3
        elif (c == "$" and ahead[:1] in ("(", "{")) or (c == "$" and ahead[:1] == "'" and state in OPENS_COMMAND):
            self.stack.append("$" + ahead[0])
            return 2
        elif state == "$((":
            if c == ")" and ahead[:1] == ")" and self.depth[-1] == 0:
                self._pop()
                return 2
            self._arithmetic(c)
        elif state in ('"', "<<"):
            self._double_quoted(c)
        else:
            return self._unquoted(c, text, i)
        return 1

    def _push(self, state: str) -> None:
        self.stack.append(state)
        self.depth.append(0)

    def _pop(self) -> bool:
        self.stack.pop()
        self.depth.pop()
        return True

    def _literal(self, c: str) -> None:
        """'...': only the closing quote; $'...': backslash escapes too; a quoted heredoc: nothing."""
        if c == "\\" and self.context == "$'":
            self.escaped = True
        elif c == "'" and self.context != "<<'":
            self.stack.pop()

    def _double_quoted(self, c: str) -> None:
        """"...", or an unquoted heredoc's body (where a double quote is a plain character)."""
        if c == '"' and self.context == '"':
            self.stack.pop()
        elif c == "`":
            self.stack.append("`")

    def _arithmetic(self, c: str) -> None:
        if c == "(":
            self.depth[-1] += 1
        elif c == ")" and self.depth[-1] > 0:
            self.depth[-1] -= 1
        elif c == "`":
            self.stack.append("`")

    def _unquoted(self, c: str, text: str, i: int) -> int:
        """Unquoted text, or inside `...`, $(...), ${...} or [[ ]], where quotes open again."""
        state, ahead = self.context, text[i + 1 : i + 3]
        at_word = i == 0 or text[i - 1] in " \t\n;&|("
        if c in ("'", '"'):
            self.stack.append(c)
        elif c == "#" and at_word:
            self.stack.append("#")  # a comment, to the end of the line: its quotes open nothing
        elif c == "`":
            self.stack.pop() if state == "`" else self.stack.append("`")
        elif (c == ")" and state == "$(") or (c == "}" and state == "${"):
            self.stack.pop()
        elif c == "(" and state == "$(":
            self.stack.append("$(")  # a nested group: its ")" must not close the substitution
        elif c == "(" and ahead[:1] == "(" and state in OPENS_COMMAND:
            self._push("$((")  # bash's ((...)) evaluates its words as arithmetic, as $((...)) does
            return 2
        elif c == "[" and ahead[:1] == "[" and at_word and state in OPENS_COMMAND:
            self.stack.append("[[")
            return 2
        elif c == "]" and ahead[:1] == "]" and state == "[[":
            self.stack.pop()
            return 2
        elif c == "<" and ahead[:1] == "<" and state in OPENS_COMMAND:
            if ahead[1:2] == "<":
                return 3  # bash's here-string: an ordinary word follows
            strip = ahead[1:2] == "-"
            self.pending.append(HereDoc(strip_tabs=strip))
            self.stack.append("<<w")
            return 3 if strip else 2
        elif c == "\n" and self.pending and state in OPENS_COMMAND:
            self._start_body()
        return 1

    def _word(self, c: str) -> None:
        """The heredoc's delimiter word: blanks before it, then up to an unquoted blank or operator."""
        doc = self.pending[-1]
        if self.word_quote:
            if c == self.word_quote:
                self.word_quote = ""
            else:
                doc.delimiter += c
        elif c in "'\"":
            self.word_quote, doc.quoted = c, True
        elif c == "\\":
            doc.quoted = True  # the next character is taken as it is (below)
        elif c in WORD_END and (doc.delimiter or c not in " \t"):
            self.stack.pop()
            if c == "\n":
                self._start_body()
        elif c not in " \t":
            doc.delimiter += c

    def _start_body(self) -> None:
        doc = self.pending.pop(0)
        self.bodies.append(doc)
        self.stack.append("<<'" if doc.quoted else "<<")
        self.line, self.line_filled = "", False

    def _body_line(self, c: str) -> bool:
        """Track the body's lines; True when `c` ended the heredoc (the delimiter line's newline)."""
        if c != "\n":
            self.line += c
            return False
        doc = self.bodies[-1]
        line = self.line.lstrip("\t") if doc.strip_tabs else self.line
        self.line, filled, self.line_filled = "", self.line_filled, False
        if filled or line != doc.delimiter:
            return False
        self.bodies.pop()
        self.stack.pop()
        if self.pending:
            self._start_body()
        return True
