"""Load hosts.toml into a Config; every failure becomes one ConfigError line a person can act on.

The line names the file and line, the key path in the user's terms (`hosts[1].gpus`), what is wrong,
and the nearest valid key or value. Pydantic's own messages are rewritten here: the user wrote TOML,
so errors speak of tables, arrays and strings, not of Python types.
"""

from __future__ import annotations

import difflib
import re
import sys
import types
import typing
from collections.abc import Iterable
from datetime import date, datetime, time
from pathlib import Path
from typing import Any

import annotated_types
import paramiko
from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from orchestrator.config.schema import Config, explicit_ssh
from orchestrator.config.ssh_config import ResolvedSSH, load_ssh_config, resolve_ssh
from orchestrator.config.toml_lines import KeyPath, find_line, format_key_path, parse_key_path
from orchestrator.errors import ConfigError
from orchestrator.plan.build import ClusterPlan, build_plan

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

_TOML_POSITION = re.compile(r"^(?P<msg>.*?)\s*\(at (?:line (?P<line>\d+), column (?P<col>\d+)|end of document)\)$")
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


def load_config(path: str | Path) -> Config:
    """Read, parse and validate hosts.toml, and check the cluster can be planned. Raises ConfigError."""
    source = str(path)
    text = _read_text(Path(path), source)
    data = _parse_toml(text, source)
    try:
        config = Config.model_validate(data)
    except ValidationError as exc:
        raise _schema_error(exc, text, source) from None
    try:
        build_plan(config, source)  # the cluster-wide rules: duplicates, missing jobs, ports, command
        _check_resolved_endpoints(config, source)
    except ConfigError as exc:
        raise _with_line(exc, text) from None
    return config


def resolve_hosts_ssh(config: Config, source: str = "hosts.toml") -> dict[str, ResolvedSSH]:
    """Each SSH host's effective settings as OpenSSH would resolve them (hosts.toml > ~/.ssh/config >
    defaults), by host name. Local hosts are left out."""
    parsed: dict[str | None, paramiko.SSHConfig | None] = {}
    out: dict[str, ResolvedSSH] = {}
    for i, host in enumerate(config.hosts):
        if host.transport != "ssh":
            continue
        explicit = explicit_ssh(config, host)
        try:
            if explicit.config_file not in parsed:
                parsed[explicit.config_file] = load_ssh_config(explicit.config_file)
            out[host.name] = resolve_ssh(
                host.address, explicit, ssh_config=parsed[explicit.config_file], load_config_file=False
            )
        except ConfigError as exc:  # ssh_config names no file; this error is about ours
            key = exc.key if exc.key and exc.source == "hosts.toml" else f"hosts[{i}].address"
            raise ConfigError(source, key, exc.message, suggestion=exc.suggestion) from None
    return out


def _check_resolved_endpoints(config: Config, source: str) -> None:
    """Two [[hosts]] entries that are one machine once ~/.ssh/config aliases are resolved, as OpenSSH
    would resolve them (HostName, Port, ProxyJump): the plan would start twice the tasks on it."""
    resolved_by_name = resolve_hosts_ssh(config, source)
    seen: dict[tuple[str, int, tuple[tuple[str, int], ...]], int] = {}
    for i, host in enumerate(config.hosts):
        resolved = resolved_by_name.get(host.name)
        if resolved is None:
            continue
        jumps = tuple((j.hostname.lower(), j.port) for j in resolved.proxy_jump)
        endpoint = (resolved.hostname.lower(), resolved.port, jumps)
        if endpoint in seen:
            j = seen[endpoint]
            other = config.hosts[j]
            raise ConfigError(
                source, f"hosts[{i}].address",
                f"host `{host.name}` (`{host.address}`) and `{other.name}` (`{other.address}`, hosts[{j}]) are "
                f"the same machine once the ssh config is applied ({resolved.hostname}:{resolved.port}); list "
                "each machine once and give it several tasks with `gpus` or `workers`",
            )
        seen[endpoint] = i


def tf_addresses(config: Config, source: str = "hosts.toml") -> dict[str, str]:
    """The address other TF tasks dial for each SSH host: an ssh-config alias only means something to
    this machine's ssh, so the cluster spec gets the HostName it stands for (ProxyJump is for the
    orchestrator's own connection: the tasks dial each other directly)."""
    return {name: resolved.hostname for name, resolved in resolve_hosts_ssh(config, source).items()}


def plan_config(config: Config, source: str = "hosts.toml") -> ClusterPlan:
    """The plan with ~/.ssh/config applied to the addresses: what `plan`, `check` and `start` use."""
    return build_plan(config, source, tf_addresses(config, source))


def alias_warnings(config: Config, source: str = "hosts.toml") -> list[str]:
    """Hosts whose address is an ssh-config alias: say which HostName the TF tasks will dial instead,
    since that name must also be reachable from every other machine of the cluster."""
    out = []
    for name, resolved in resolve_hosts_ssh(config, source).items():
        if resolved.hostname.lower() != resolved.alias.lower():
            out.append(
                f"host {name}: `{resolved.alias}` is an ssh config alias for {resolved.hostname}; the cluster "
                f"spec uses {resolved.hostname}, which every other machine must be able to reach"
            )
    return out


def _read_text(path: Path, source: str) -> str:
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


def _with_line(exc: ConfigError, text: str) -> ConfigError:
    if exc.line is not None or not exc.key:
        return exc
    line = find_line(text, parse_key_path(exc.key))
    return ConfigError(exc.source, exc.key, exc.message, line=line, suggestion=exc.suggestion)


# --- schema errors -------------------------------------------------------------------------------


def _schema_error(exc: ValidationError, text: str, source: str) -> ConfigError:
    """The first problem in file order, rewritten in hosts.toml's terms."""
    grouped: dict[KeyPath, list[ErrorDetails]] = {}
    owners: dict[KeyPath, tuple[type[BaseModel] | None, Any]] = {}
    for err in exc.errors():
        loc, owner, field = _user_path(err["loc"])
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


def _describe(
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
    if kind == "missing" and loc == ("hosts",):
        return "no [[hosts]] table: describe at least one machine (see hosts.example.toml)", None
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
        fixed = re.sub(r"[^A-Za-z0-9_.-]+", "-", str(value)).strip("-._") or None
        return f"{_toml_literal(value)} is not a valid name: use letters, digits, `.`, `_` and `-`", fixed
    if kind == "value_error":
        return str(ctx.get("error", err["msg"])).removeprefix("Value error, "), None
    return err["msg"], None


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
        text = '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
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
