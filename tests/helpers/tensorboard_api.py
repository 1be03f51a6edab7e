"""Reading a running TensorBoard through its HTTP API, as a browser does (tests of `tfcluster tensorboard`)."""

from __future__ import annotations

import json
import urllib.parse
import urllib.request
from typing import Any


def get(url: str, path: str, **query: str) -> Any:
    full = url.rstrip("/") + path + ("?" + urllib.parse.urlencode(query) if query else "")
    with urllib.request.urlopen(full, timeout=30) as response:
        return json.loads(response.read())


def scalar_tags(url: str) -> dict[str, list[str]]:
    """{run: [tag, ...]} of the scalars TensorBoard has loaded."""
    return {run: sorted(tags) for run, tags in get(url, "/data/plugin/scalars/tags").items()}


def scalars(url: str, run: str, tag: str) -> list[tuple[int, float]]:
    """[(step, value)] of one run's tag, as TensorBoard serves them."""
    return [(int(step), float(value)) for _, step, value in get(url, "/data/plugin/scalars/scalars", run=run, tag=tag)]
