"""Finding the line of a key path in TOML text (what config errors point at)."""

from __future__ import annotations

from orchestrator.config.load import tomllib  # tomllib, or tomli on Python 3.10
from orchestrator.config.toml_lines import find_line, format_key_path, key_lines, parse_key_path

TEXT = '''\
title = "x"
[cluster]
name = "a"
[[hosts]]
name = "h0"
ssh.port = 22
[[hosts]]
name = "h1"
[hosts.ssh]
user = "u"
[training]
command = """
port = 1
"""
slowdown = { "worker:1" = 2.0, chief = 1.5 }
"x.y" = 3
'''


def test_key_lines_follow_tables_arrays_and_subtables() -> None:
    lines = key_lines(TEXT)
    assert lines[("title",)] == 1
    assert lines[("cluster", "name")] == 3
    assert lines[("hosts", 0)] == 4 and lines[("hosts", 0, "name")] == 5
    assert lines[("hosts", 0, "ssh", "port")] == 6  # dotted key
    assert lines[("hosts", 1, "name")] == 8
    assert lines[("hosts", 1, "ssh", "user")] == 10  # [hosts.ssh] belongs to the last [[hosts]]
    assert lines[("training", "slowdown", "worker:1")] == 15  # inside an inline table
    assert lines[("training", "slowdown", "chief")] == 15
    assert lines[("training", "x.y")] == 16  # a quoted key with a dot is one key


def test_text_is_valid_toml() -> None:
    assert tomllib.loads(TEXT)["hosts"][1]["ssh"] == {"user": "u"}


def test_multiline_string_content_is_not_a_key() -> None:
    assert ("training", "port") not in key_lines(TEXT)


def test_find_line_falls_back_to_the_enclosing_table() -> None:
    assert find_line(TEXT, ("hosts", 1, "address")) == 7
    assert find_line(TEXT, ("hosts", 0, "gpus", 3)) == 4
    assert find_line(TEXT, ("remote", "python")) is None


def test_key_path_text_round_trips() -> None:
    path = ("training", "slowdown", "worker:1")
    assert format_key_path(path) == 'training.slowdown."worker:1"'
    assert parse_key_path(format_key_path(path)) == path
    assert format_key_path(("hosts", 2, "gpus", 0)) == "hosts[2].gpus[0]"
    assert parse_key_path("hosts[2].gpus[0]") == ("hosts", 2, "gpus", 0)
