"""The docs name the code as it is: every module or folder of the project that README.md or docs/DESIGN.md
names (`training/run/layout.py`, `orchestrator/transport/ssh*.py`, `training/tf2/`) exists."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCS = ("README.md", "docs/DESIGN.md")
# A path that starts at one of the project's top folders (not inside another path such as
# ~/.local/state/tfcluster/runs/) and ends in a Python file or a folder's slash.
NAMED_PATH = re.compile(r"(?<![\w/.~-])((?:training|orchestrator|tfcluster|tui|testkit|tests|benchmarks|scripts)/"
                        r"(?:[\w*.-]+/)*(?:[\w*-]+\.py)?)(?![\w/])")


def named_paths(doc: str) -> list[str]:
    return sorted(set(NAMED_PATH.findall((REPO / doc).read_text(encoding="utf-8"))))


@pytest.mark.parametrize("doc", DOCS)
def test_every_path_the_docs_name_exists(doc: str) -> None:
    paths = named_paths(doc)
    assert len(paths) > 5, paths  # the pattern still finds what the docs name
    missing = [p for p in paths if not any(REPO.glob(p.rstrip("/")))]
    assert missing == [], f"{doc} names paths that do not exist: {missing}"
