"""hosts.toml -> a `ValidConfig` (`validate_file`); every failure becomes one ConfigError line a person can
act on, with the file's line added here, in one place.

The line names the file and line, the key path in the user's terms (`hosts[1].gpus`), what is wrong,
and the nearest valid key or value. The text is read and parsed here, checked against the schema (its
errors rewritten in TOML's terms by orchestrator.config.explain), a `--mode` override applied, and the
Config validated (orchestrator.config.validate). `load_config` stops at the schema.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from orchestrator.config.explain import schema_error
from orchestrator.config.modes import Mode
from orchestrator.config.schema import Config
from orchestrator.config.toml_lines import find_line, parse_key_path
from orchestrator.config.validate import Machines, ValidConfig, validate
from orchestrator.errors import ConfigError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

_TOML_POSITION = re.compile(r"^(?P<msg>.*?)\s*\(at (?:line (?P<line>\d+), column (?P<col>\d+)|end of document)\)$")


def validate_file(path: str | Path, mode: Mode | None = None, machines: Machines | None = None) -> ValidConfig:
    """hosts.toml at `path`, validated (optionally in another mode; for a command that runs only on
    `machines`). Raises ConfigError with the file's line."""
    config, text = read_config(path)
    config = with_mode(config, mode)
    try:
        return validate(config, str(path), machines)
    except ConfigError as exc:
        raise with_line(exc, text) from None


def with_mode(config: Config, mode: Mode | None) -> Config:
    if mode is None or mode == config.cluster.mode:
        return config
    return config.model_copy(update={"cluster": config.cluster.model_copy(update={"mode": mode})})


def load_config(path: str | Path) -> Config:
    """Read, parse and validate hosts.toml against the schema. Raises ConfigError."""
    return read_config(path)[0]


def read_config(path: str | Path) -> tuple[Config, str]:
    """The validated Config and the file's text (for the lines of later errors: `with_line`)."""
    source = str(path)
    text = read_text(Path(path), source)
    data = _parse_toml(text, source)
    try:
        return Config.model_validate(data), text
    except ValidationError as exc:
        raise schema_error(exc, text, source) from None


def read_text(path: Path, source: str) -> str:
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise ConfigError(source, None, "file not found (copy hosts.example.toml to start one)") from None
    except IsADirectoryError:
        raise ConfigError(source, None, "is a directory, not a hosts.toml file") from None
    except PermissionError:
        raise ConfigError(source, None, "cannot read the file: permission denied") from None
    except OSError as exc:
        raise ConfigError(source, None, f"cannot read the file: {exc.strerror or exc}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        before = raw[: exc.start]
        line = before.count(b"\n") + 1
        column = exc.start - (before.rfind(b"\n") + 1) + 1
        raise ConfigError(
            source, None,
            f"not UTF-8 text (byte 0x{raw[exc.start]:02x} at column {column}); save the file as UTF-8",
            line=line,
        ) from None
    text = text.removeprefix("\ufeff")  # a BOM from some editors: harmless, not part of the TOML
    if not text.strip():
        raise ConfigError(
            source, None, "file is empty: describe your machines in [[hosts]] tables (see hosts.example.toml)"
        )
    return text


def _parse_toml(text: str, source: str) -> dict[str, Any]:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise _syntax_error(exc, text, source) from None


def _syntax_error(exc: tomllib.TOMLDecodeError, text: str, source: str) -> ConfigError:
    m = _TOML_POSITION.match(str(exc))
    message = m.group("msg") if m else str(exc)
    line = int(m.group("line")) if m and m.group("line") else None
    column = int(m.group("col")) if m and m.group("col") else None
    if line is None and m:  # "at end of document": the last non-blank line is where it went wrong
        line = len(text.rstrip().splitlines())
    suggestion = None
    lines = text.splitlines()
    source_line = lines[line - 1] if line is not None and 0 < line <= len(lines) else ""
    if message.startswith("Cannot overwrite a value") or message.startswith("Cannot declare"):
        key = re.match(r"^\s*\[*\s*([^=\]]+?)\s*(=|\])", source_line)
        message = f"`{key.group(1)}` is given twice" if key else "a key or table is given twice"
    elif bare := _unquoted_string(source_line):
        message = f"invalid value `{bare}`: strings need quotes"
        suggestion = f'"{bare}"'
    else:
        message = message[:1].lower() + message[1:]
    if column is not None:
        message += f" (column {column})"
    return ConfigError(source, None, f"TOML syntax error: {message}", line=line, suggestion=suggestion)


def _unquoted_string(line: str) -> str | None:
    """The value of a `key = value` line when it is a bare word TOML cannot read (address = 10.0.0.1)."""
    m = re.match(r"^\s*[A-Za-z0-9_.\"'-]+\s*=\s*([^\s\"'\[{#][^#]*?)\s*(#.*)?$", line)
    if m is None:
        return None
    try:
        tomllib.loads(f"x = {m.group(1)}")
    except tomllib.TOMLDecodeError:
        return m.group(1)
    return None


def with_line(exc: ConfigError, text: str) -> ConfigError:
    """The same error with the line of its key in `text`, when it has a key and no line yet."""
    if exc.line is not None or not exc.key:
        return exc
    line = find_line(text, parse_key_path(exc.key))
    return ConfigError(exc.source, exc.key, exc.message, line=line, suggestion=exc.suggestion)
