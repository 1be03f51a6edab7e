"""Pydantic's validation errors, rewritten in hosts.toml's terms: the first problem in file order, as
one line that speaks of tables, arrays and strings (the user wrote TOML, not Python types), with the
line, the key path and the nearest valid key or value.
"""

from __future__ import annotations

import difflib
import json
import re
import types
import typing
from collections.abc import Iterable
from datetime import date, datetime, time
from typing import Any

import annotated_types
from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from orchestrator.config.schema import Config
from orchestrator.config.toml_lines import KeyPath, find_line, format_key_path, parse_key_path
from orchestrator.errors import ConfigError

_TYPE_WORDS = {
    "int_type": "an integer",
    "float_type": "a number",
    "string_type": "a string",
    "bool_type": "a boolean (true or false)",
    "list_type": "an array",
    "dict_type": "a table",
    "model_type": "a table",
    "model_attributes_type": "a table",
}


def schema_error(exc: ValidationError, text: str, source: str) -> ConfigError:
    """The first problem in file order, rewritten in hosts.toml's terms."""
    grouped: dict[KeyPath, list[ErrorDetails]] = {}
    owners: dict[KeyPath, tuple[type[BaseModel] | None, Any]] = {}
    for err in exc.errors():
        loc, owner, field = _user_path(err["loc"])
        if key := (err.get("ctx") or {}).get("key"):  # a rule over several keys names the one it is about
            loc = parse_key_path(str(key))
        grouped.setdefault(loc, []).append(err)
        owners[loc] = (owner, field)
    problems = []
    for order, (loc, errors) in enumerate(grouped.items()):
        line = find_line(text, loc)
        owner, field = owners[loc]
        message, suggestion = _describe(loc, errors, owner, field)
        problems.append((line if line is not None else 1 << 30, order, loc, line, message, suggestion))
    _, _, loc, line, message, suggestion = min(problems)
    return ConfigError(source, format_key_path(loc) or None, message, line=line, suggestion=suggestion)


def _unwrap(annotation: Any) -> Any:
    """Strip Annotated[...] and `| None` so the walker sees the container or model underneath."""
    while True:
        origin = typing.get_origin(annotation)
        if origin is typing.Annotated:
            annotation = typing.get_args(annotation)[0]
        elif origin in (typing.Union, types.UnionType):
            members = [a for a in typing.get_args(annotation) if a is not type(None)]
            if len(members) != 1:
                return annotation
            annotation = members[0]
        else:
            return annotation


def _user_path(loc: tuple[str | int, ...]) -> tuple[KeyPath, type[BaseModel] | None, Any]:
    """Pydantic's loc, cut to the keys the user wrote (union member tags dropped), with the model that
    owns the last key and that key's field (FieldInfo or inner annotation, for bounds)."""
    current: Any = Config
    owner: type[BaseModel] | None = None
    field: Any = None
    path: list[str | int] = []
    for part in loc:
        kind = _unwrap(current)
        origin = typing.get_origin(kind)
        if isinstance(kind, type) and issubclass(kind, BaseModel) and isinstance(part, str):
            path.append(part)
            owner = kind
            info = kind.model_fields.get(part)
            if info is None:
                break  # an unknown key: the path ends with it
            field = info
            current = info.annotation
        elif origin is list and isinstance(part, int):
            path.append(part)
            current = field = typing.get_args(kind)[0]
        elif origin is dict and isinstance(part, str):
            path.append(part)
            current = field = typing.get_args(kind)[1]
        else:
            break  # a union member's tag, not a key of the file
    return tuple(path), owner, field


def _describe(  # noqa: PLR0912 - one branch per kind of pydantic error
    loc: KeyPath, errors: list[ErrorDetails], owner: type[BaseModel] | None, field: Any
) -> tuple[str, str | None]:
    err = errors[0]
    kind, value = err["type"], err.get("input")
    key = next((p for p in reversed(loc) if isinstance(p, str)), "")
    ctx = err.get("ctx") or {}

    if kind == "extra_forbidden":
        valid = list(owner.model_fields) if owner else []
        close = difflib.get_close_matches(key, valid, n=1, cutoff=0.6)
        where = "section" if len(loc) == 1 else "key"
        message = f"unknown {where} `{key}`"
        if not close:
            message += f"; valid here: {', '.join(valid)}"
        return message, close[0] if close else None
    if kind == "tfcluster":  # our own rules (orchestrator.config.slurm_schema.custom_error): said as they are
        return err["msg"], ctx.get("suggestion")
    if kind == "missing":
        return f"required key `{key}` is missing", None
    if loc == ("training", "sync") and isinstance(value, bool):
        return (
            "`sync` is the list of files shipped with your program (sync = [\"train.py\"]); synchronous "
            "training is switched on by `sync_replicas = true`",
            "sync_replicas = true",
        )
    if loc == ("hosts",) and kind == "list_type" and isinstance(value, dict):
        return "hosts must be an array of tables: write [[hosts]] (two brackets) for each machine", "[[hosts]]"
    if len(loc) == 1 and kind == "model_type" and isinstance(value, list):
        return f"`{key}` is a single table: write [{key}], not [[{key}]]", f"[{key}]"
    if kind in _TYPE_WORDS:
        kinds = {e["type"] for e in errors}
        if {"int_type", "float_type"} <= kinds:
            kinds.discard("int_type")  # "a number" covers both
        expected = _join_or(dict.fromkeys(_TYPE_WORDS.get(e["type"], e["type"]) for e in errors if e["type"] in kinds))
        return f"expected {expected}, got {_toml_type(value)} {_toml_literal(value)}", _retyped(kind, value)
    if kind == "literal_error":
        choices = re.findall(r"'([^']*)'", str(ctx.get("expected", "")))
        close = difflib.get_close_matches(str(value), choices, n=1, cutoff=0.5)
        what = "a role" if "roles" in loc else f"a valid `{key}`"
        return f"{_toml_literal(value)} is not {what}; choose one of {', '.join(choices)}", close[0] if close else None
    if kind in ("greater_than_equal", "less_than_equal", "greater_than", "less_than"):
        fields = owner.model_fields if owner else {}
        container = next((p for p in reversed(loc) if isinstance(p, str) and p in fields), "")
        if loc and loc[-1] == container:
            return _out_of_range(container, value, field), None
        return _out_of_range("", value, field, list_of=container), None
    if kind == "too_short":
        if loc == ("hosts",):
            return "no hosts: describe at least one machine in a [[hosts]] table", None
        if "roles" in loc:
            return 'must list at least one role (roles = ["worker"]; roles are ps, worker, chief)', None
        return "must not be empty", None
    if kind == "string_too_short":
        return "must not be empty", None
    if kind == "string_pattern_mismatch":
        return _pattern_message(loc, value)
    if kind == "value_error":
        return str(ctx.get("error", err["msg"])).removeprefix("Value error, "), None
    return err["msg"], None


def _pattern_message(loc: KeyPath, value: object) -> tuple[str, str | None]:
    """A string that does not match its key's pattern: host names, environment names, one-line strings."""
    key = next((p for p in reversed(loc) if isinstance(p, str)), "")
    is_env_name = (len(loc) >= 2 and loc[-2] == "env" and value == loc[-1]) or "forward_env" in loc
    if is_env_name:
        fixed = re.sub(r"[^A-Za-z0-9_]+", "_", str(value)).strip("_")
        fixed = f"_{fixed}" if fixed[:1].isdigit() else fixed
        return (f"{_toml_literal(value)} is not an environment variable name: use letters, digits and `_`, "
                "not starting with a digit"), (fixed if fixed and fixed != value else None)
    if "env" in loc:
        return "an environment value cannot contain a NUL character", None
    if key == "name":
        name = re.sub(r"[^A-Za-z0-9_.-]+", "-", str(value)).strip("-._")
        return f"{_toml_literal(value)} is not a valid name: use letters, digits, `.`, `_` and `-`", name or None
    return f"{_toml_literal(value)} must be one line (no newline, tab or other control character)", None


def _join_or(words: Iterable[str]) -> str:
    items = list(words)
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " or " + items[-1]


def _toml_type(value: object) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a float"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "a table"
    if isinstance(value, (datetime, date, time)):
        return "a date/time"
    return type(value).__name__


def _toml_literal(value: object, limit: int = 40) -> str:
    """A value as the user wrote it in TOML, shortened, in backticks."""
    text = _toml_text(value)
    text = text if len(text) <= limit else text[: limit - 1] + "…"
    return f"`{text}`"


def _toml_text(value: object) -> str:
    if isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, str):
        text = json.dumps(value, ensure_ascii=False)  # TOML's basic strings escape like JSON: one line
    elif isinstance(value, list):
        text = "[" + ", ".join(_toml_text(v) for v in value) + "]"
    elif isinstance(value, dict):
        text = "{ " + ", ".join(f"{k} = {_toml_text(v)}" for k, v in value.items()) + " }"
    else:
        text = str(value)
    return text


def _retyped(expected: str, value: object) -> str | None:
    """The same value written as the expected TOML type, when that is obvious."""
    if expected == "int_type" and isinstance(value, str) and re.fullmatch(r"[+-]?\d+", value.strip()):
        return value.strip()
    if expected == "int_type" and isinstance(value, float) and value.is_integer():
        return str(int(value))
    if expected == "float_type" and isinstance(value, str):
        try:
            return str(float(value))
        except ValueError:
            return None
    if expected == "string_type" and isinstance(value, (int, float)) and not isinstance(value, bool):
        return f'"{value}"'
    if expected == "bool_type" and isinstance(value, str) and value.lower() in ("true", "false", "yes", "no"):
        return "true" if value.lower() in ("true", "yes") else "false"
    if expected == "list_type" and isinstance(value, (str, int, float)) and not isinstance(value, bool):
        return "[" + _toml_text(value) + "]"
    return None


def _bounds(field: Any) -> tuple[tuple[str, float] | None, tuple[str, float] | None]:
    """The (op, bound) pairs of a field's lower and upper constraints, e.g. ((">=", 1), ("<=", 65535))."""
    metadata: list[Any] = list(getattr(field, "metadata", []) or [])
    annotation = getattr(field, "annotation", field)
    for arg in [annotation, *typing.get_args(annotation)]:
        if typing.get_origin(arg) is typing.Annotated:
            for extra in typing.get_args(arg)[1:]:
                metadata.extend(getattr(extra, "metadata", [extra]))
    low: tuple[str, float] | None = None
    high: tuple[str, float] | None = None
    for m in metadata:
        if isinstance(m, annotated_types.Ge):
            low = (">=", m.ge)  # type: ignore[assignment]
        elif isinstance(m, annotated_types.Gt):
            low = (">", m.gt)  # type: ignore[assignment]
        elif isinstance(m, annotated_types.Le):
            high = ("<=", m.le)  # type: ignore[assignment]
        elif isinstance(m, annotated_types.Lt):
            high = ("<", m.lt)  # type: ignore[assignment]
    return low, high


def _out_of_range(key: str, value: object, field: Any, list_of: str = "") -> str:
    """`key` names a field; `list_of` the array or table holding the value (gpus, slowdown)."""
    low, high = _bounds(field)
    names = {"gpus": "GPU index", "slowdown": "slowdown factor"}
    what = "port" if key.endswith("port") else f"`{key}`" if key else names.get(list_of, "value")
    if low and high and low[0] == ">=" and high[0] == "<=":
        return f"{what} {value} is out of range ({_num(low[1])}-{_num(high[1])})"
    limits = [f"{pair[0]} {_num(pair[1])}" for pair in (low, high) if pair is not None]
    return f"{what} {value} is out of range (must be {' and '.join(limits)})"


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)
