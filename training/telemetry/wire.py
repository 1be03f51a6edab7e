"""Checked reading of the JSON the hosts write (task records, state files, reports): `StateFileError` for a
value that is not what the writer writes, `take` for one field of an expected type, `as_object` for a
document. Shared by the wire record (task_record.py) and the state-file decoders (state_files.py); no
`dataclasses` or `typing` at run time, since the supervisor imports it at every start. Stdlib only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from typing import Any

NUMBER = (int, float)
REQUIRED: Any = ...  # `take`'s default: the field must be there


class StateFileError(ValueError):
    """A state file, record or report that is not what the supervisor writes."""


def take(d: dict[str, Any], key: str, kind: type | tuple[type, ...], default: Any = REQUIRED) -> Any:
    """d[key], checked to be of `kind` (a bool is never an int here); `default` when it is absent, and
    null allowed when the default is None."""
    if key not in d:
        if default is REQUIRED:
            raise StateFileError(f"no {key!r}")
        return default
    value = d[key]
    if value is None and default is None:
        return None
    if isinstance(value, bool) and bool not in (kind if isinstance(kind, tuple) else (kind,)):
        raise StateFileError(f"{key!r} is a boolean")
    if not isinstance(value, kind):
        raise StateFileError(f"{key!r} is {type(value).__name__}")
    return value


def as_object(raw: object, what: str) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise StateFileError(f"{what} is {type(raw).__name__}, not an object")
    return raw
