"""Shared test code lives once, in tests/helpers/ or a conftest: no test module imports another test module
(pytest may collect, order or run that module on another worker; its fixtures would run twice)."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def _imported_modules(path: Path) -> list[str]:
    names: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.append(node.module)
        elif isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
    return names


def test_no_test_module_imports_another() -> None:
    offenders = sorted(f"{p.relative_to(TESTS.parent)} imports {m}" for p in TESTS.rglob("*.py")
                       for m in _imported_modules(p) if m.split(".")[-1].startswith("test_"))
    assert offenders == []
