"""Values that break naive quoting, and a program that prints the argv it got as JSON."""

from __future__ import annotations

import sys

NASTY = [
    "plain",
    "with space",
    "it's",
    'say "hi"',
    "$HOME",
    "`id`",
    "$(id)",
    "a;b",
    "x && y || z",
    "line1\nline2",
    "*",
    "tab\there",
    "back\\slash",
    "",
    "-n",
    "ünïcödé",
]
ECHO_ARGV = [sys.executable, "-c", "import json, sys; print(json.dumps(sys.argv[1:]))"]
