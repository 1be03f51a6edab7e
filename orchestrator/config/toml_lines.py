"""Where a key path lives in TOML source text, so an error can name the line (best effort, no parser).

Key paths are tuples in the user's terms: ("hosts", 1, "gpus") is the `gpus =` line of the second
`[[hosts]]` table, shown as `hosts[1].gpus`. tomllib gives values, not positions, so this module scans
the text for table headers and `key =` lines; it understands dotted keys, quoted keys, arrays of
tables, sub-tables of the last array element (`[hosts.ssh]`), one-line inline tables and multi-line
strings. Anything it cannot place falls back to the nearest enclosing table, or to no line at all.
"""

from __future__ import annotations

import re

KeyPath = tuple[str | int, ...]

_BARE = r"[A-Za-z0-9_-]+"
_KEY = rf'(?:{_BARE}|"(?:[^"\\]|\\.)*"|\'[^\']*\')'
_DOTTED = rf"{_KEY}(?:\s*\.\s*{_KEY})*"
_ARRAY_HEADER = re.compile(rf"^\s*\[\[\s*({_DOTTED})\s*\]\]")
_TABLE_HEADER = re.compile(rf"^\s*\[\s*({_DOTTED})\s*\]")
_KEY_VALUE = re.compile(rf"^\s*({_DOTTED})\s*=\s*(.*)$")
_INLINE_KEY = re.compile(rf"[{{,]\s*({_DOTTED})\s*=")
_PATH_PART = re.compile(r'([^.\[\]"]+)|"((?:[^"\\]|\\.)*)"|\[(\d+)\]')


def split_dotted(dotted: str) -> list[str]:
    """`a."b.c".d` -> ["a", "b.c", "d"]."""
    return [m.group(1) or m.group(2) or m.group(3) for m in re.finditer(rf"({_BARE})|\"((?:[^\"\\]|\\.)*)\"|'([^']*)'", dotted)]


def format_key_path(path: KeyPath) -> str:
    """("hosts", 1, "gpus") -> "hosts[1].gpus"; keys that are not bare words are quoted."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            key = part if re.fullmatch(_BARE, part) else '"' + part.replace('"', '\\"') + '"'
            out += ("." if out else "") + key
    return out


def parse_key_path(text: str) -> KeyPath:
    """The inverse of format_key_path: "hosts[1].gpus" -> ("hosts", 1, "gpus")."""
    parts: list[str | int] = []
    for m in _PATH_PART.finditer(text):
        if m.group(3) is not None:
            parts.append(int(m.group(3)))
        else:
            parts.append(m.group(1) if m.group(1) is not None else m.group(2))
    return tuple(parts)


def key_lines(text: str) -> dict[KeyPath, int]:
    """Every key path the scanner can place, with its 1-based line (the first occurrence wins)."""
    lines: dict[KeyPath, int] = {}
    array_counts: dict[KeyPath, int] = {}  # array-of-tables path -> number of elements seen so far
    current: KeyPath = ()
    in_multiline: str | None = None

    def resolve(parts: list[str]) -> KeyPath:
        """A header's dotted name, with the latest element index after each array-of-tables prefix."""
        path: KeyPath = ()
        for part in parts:
            path = (*path, part)
            if path in array_counts:
                path = (*path, array_counts[path] - 1)
        return path

    for number, raw in enumerate(text.splitlines(), start=1):
        if in_multiline is not None:
            if raw.count(in_multiline) % 2 == 1:
                in_multiline = None
            continue
        if m := _ARRAY_HEADER.match(raw):
            parts = split_dotted(m.group(1))
            parent = resolve(parts[:-1])
            array_path = (*parent, parts[-1])
            index = array_counts.get(array_path, 0)
            array_counts[array_path] = index + 1
            current = (*array_path, index)
            lines.setdefault(array_path, number)
            lines.setdefault(current, number)
            continue
        if m := _TABLE_HEADER.match(raw):
            current = resolve(split_dotted(m.group(1)))
            lines.setdefault(current, number)
            continue
        if m := _KEY_VALUE.match(raw):
            path = (*current, *split_dotted(m.group(1)))
            lines.setdefault(path, number)
            value = m.group(2)
            if value.lstrip().startswith("{"):
                for inner in _INLINE_KEY.finditer(value):
                    lines.setdefault((*path, *split_dotted(inner.group(1))), number)
            for quote in ('"""', "'''"):
                if value.count(quote) % 2 == 1:
                    in_multiline = quote
                    break
    return lines


def find_line(text: str, path: KeyPath) -> int | None:
    """The line of `path`, else of its nearest enclosing key or table that appears in the text."""
    lines = key_lines(text)
    for end in range(len(path), 0, -1):
        if path[:end] in lines:
            return lines[path[:end]]
    return None
