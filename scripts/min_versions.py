#!/usr/bin/env python3
"""Runs the unit tests and the linters against the lowest dependency versions pyproject.toml declares.

    python3 scripts/min_versions.py [--venv DIR] [--print-constraints] [--tests-only] [PYTEST_ARGS...]

Contract:
- Reads the floors (`NAME>=X`) of `[project] dependencies` and of the `cpu`, `test` and `tensorboard`
  extras from pyproject.toml, and nothing else: the pins are generated from the file on every run, so the
  declared floors and the tested versions never drift apart. Every such requirement must declare a floor (a
  requirement without one exits 2 with one line naming it).
- Writes them as a pip constraints file pinning each to exactly its floor (`NAME==X`, environment
  markers kept, extras dropped: pip refuses extras in constraints), creates the venv DIR (default
  `.venv-min`, separate from `.venv`), installs the project `.[cpu,test,tensorboard]` there from PyPI
  under those constraints (transitive dependencies resolve to whatever the pinned versions allow), then runs
  `pytest -q tests/unit` (or PYTEST_ARGS) and, unless --tests-only, `make lint`'s three checks (ruff,
  mypy --strict, import-linter) with the tools at their floors and mypy reading the floors' types.
- The install is skipped when DIR was built from the same pyproject.toml (a stamp holds its digest).
- Exit 0 when every step passes. A failed install stops the run with pip's exit code; the checks all
  run, and the exit code is the first failing one's (pytest's 5, "no tests ran", included). Each
  failing step prints one line on stderr, "scripts/min_versions.py: FAILED: STEP (exit N)".
  --print-constraints prints the constraints and exits 0 without installing anything.

Needs Python >= 3.11 (tomllib) or the tomli package; the venv is made with the Python running this.
"""

from __future__ import annotations

import argparse
import hashlib
import re
import subprocess
import sys
import venv
from pathlib import Path

ME = "scripts/min_versions.py"
ROOT = Path(__file__).resolve().parent.parent
EXTRAS = ("cpu", "test", "tensorboard")
STAMP = ".pyproject-sha256"
TAIL_LINES = 30

# PEP 508, as far as this project's pyproject uses it: NAME [EXTRAS] SPECIFIERS [; MARKER]
REQUIREMENT = re.compile(
    r"^\s*(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[[^\]]*\])?\s*(?P<specs>[^;]*?)\s*(?:;\s*(?P<marker>.+?))?\s*$"
)
FLOOR = re.compile(r"^>=\s*(?P<version>[0-9][A-Za-z0-9.+!-]*)$")


class BadPyproject(Exception):
    """pyproject.toml lacks what this check reads; the message is the one line to print."""


def load_pyproject(path: Path) -> dict[str, object]:
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        try:
            import tomli as tomllib  # type: ignore[no-redef,import-not-found,unused-ignore]
        except ModuleNotFoundError:
            raise BadPyproject(f"reading {path} needs Python >= 3.11 or the tomli package") from None
    with path.open("rb") as file:
        data: dict[str, object] = tomllib.load(file)
    return data


def declared_requirements(pyproject: dict[str, object]) -> list[tuple[str, str]]:
    """(where, requirement) for [project] dependencies and the extras this check installs."""
    project = pyproject.get("project")
    if not isinstance(project, dict):
        raise BadPyproject("pyproject.toml: no [project] table")
    found = [("project.dependencies", str(r)) for r in project.get("dependencies", [])]
    extras = project.get("optional-dependencies", {})
    for extra in EXTRAS:
        if extra not in extras:
            raise BadPyproject(f"pyproject.toml: project.optional-dependencies.{extra} is missing")
        found += [(f"project.optional-dependencies.{extra}", str(r)) for r in extras[extra]]
    return found


def pin_to_floor(where: str, requirement: str) -> str:
    """`NAME>=X; MARKER` -> `NAME==X; MARKER` (the constraint line)."""
    match = REQUIREMENT.match(requirement)
    if match is None:
        raise BadPyproject(f"pyproject.toml: {where}: cannot read the requirement {requirement!r}")
    floors = [m["version"] for s in match["specs"].split(",") if (m := FLOOR.match(s.strip()))]
    if len(floors) != 1:
        raise BadPyproject(f"pyproject.toml: {where}: {requirement!r} declares no single '>=' floor")
    marker = f"; {match['marker']}" if match["marker"] else ""
    return f"{match['name']}=={floors[0]}{marker}"


def constraints(pyproject_path: Path) -> str:
    pyproject = load_pyproject(pyproject_path)
    lines = [pin_to_floor(where, req) for where, req in declared_requirements(pyproject)]
    return "".join(line + "\n" for line in lines)


def run(step: str, command: list[str], quiet: bool = False) -> int:
    """Run a step and return its exit code; on failure, one line says which step failed. A quiet
    step's output is shown only when it fails, and then only its end (pip explains a conflict there)."""
    print(f"{ME}: {step}", flush=True)
    if quiet:
        done = subprocess.run(
            command, check=False, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        code = done.returncode
        if code != 0:
            sys.stdout.write("".join(done.stdout.splitlines(keepends=True)[-TAIL_LINES:]))
    else:
        code = subprocess.call(command, cwd=ROOT)
    if code != 0:
        print(f"{ME}: FAILED: {step} (exit {code})", file=sys.stderr, flush=True)
    return code


def must(step: str, command: list[str], quiet: bool = False) -> None:
    """Run a step the later ones need: exit with its code when it fails."""
    code = run(step, command, quiet)
    if code != 0:
        sys.exit(code)


def build_venv(venv_dir: Path, pins: str, digest: str) -> Path:
    python = venv_dir / "bin" / "python"
    stamp = venv_dir / STAMP
    if python.exists() and stamp.exists() and stamp.read_text() == digest:
        print(f"{ME}: {venv_dir.name} is up to date with pyproject.toml", flush=True)
        return python
    print(f"{ME}: creating {venv_dir.name} with {sys.executable}", flush=True)
    venv.EnvBuilder(clear=True, with_pip=True).create(venv_dir)
    constraints_file = venv_dir / "constraints.txt"
    constraints_file.write_text(pins)
    pip = [str(python), "-m", "pip", "install", "--progress-bar", "off"]
    must("upgrading pip", [*pip, "--upgrade", "pip"], quiet=True)
    must(
        f"installing .[{','.join(EXTRAS)}] with every dependency at its declared floor (a floor must be a release "
        "on PyPI that installs on this Python)",
        [*pip, "-c", str(constraints_file), "-e", f".[{','.join(EXTRAS)}]"],
        quiet=True,
    )
    stamp.write_text(digest)
    return python


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog=ME, description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument(
        "--venv", default=".venv-min", help="the venv to build and test in (default .venv-min)"
    )
    parser.add_argument("--print-constraints", action="store_true", help="print the pins and stop")
    parser.add_argument("--tests-only", action="store_true", help="skip ruff, mypy and import-linter")
    args, pytest_args = parser.parse_known_args(argv)
    pyproject_path = ROOT / "pyproject.toml"
    try:
        pins = constraints(pyproject_path)
    except BadPyproject as error:
        print(f"{ME}: {error}", file=sys.stderr)
        return 2
    if args.print_constraints:
        sys.stdout.write(pins)
        return 0
    venv_dir = (ROOT / args.venv).resolve()
    if venv_dir in (ROOT, (ROOT / ".venv").resolve()):  # building clears DIR: never the project or .venv
        print(
            f"{ME}: --venv {args.venv}: refusing to rebuild the project's own venv or folder", file=sys.stderr
        )
        return 2
    digest = hashlib.sha256(pyproject_path.read_bytes()).hexdigest()
    python = build_venv(venv_dir, pins, digest)
    sys.stdout.write("tested at these floors:\n" + pins)
    sys.stdout.flush()
    bin_dir = python.parent
    steps = [
        (
            "unit tests at the declared floors",
            [str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider", *(pytest_args or ["tests/unit"])],
        ),
        ("ruff at its declared floor", [str(bin_dir / "ruff"), "check", "."]),
        (
            "mypy --strict at its declared floor, against the floors' type information",
            [str(bin_dir / "mypy")],
        ),
        ("import-linter at its declared floor", [str(bin_dir / "lint-imports")]),
    ]
    if args.tests_only:
        steps = steps[:1]
    codes = [run(step, command) for step, command in steps]  # every step runs: one report for all
    return next((code for code in codes if code != 0), 0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
