"""The full own-tool catalog, as ``tools/list`` shows it, pinned in ``catalog.golden.json``: names, order,
toolsets, titles, descriptions, annotation hints and input/output schemas.

A change to a tool's declaration shows up here as a readable diff. After an intended change regenerate the
file with ``.venv/bin/python -m tests.gateway.test_catalog_pin`` and review the diff.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from gateway.tools import all_specs

GOLDEN = Path(__file__).with_name("catalog.golden.json")


def current_catalog() -> list[dict[str, Any]]:
    return [
        {
            "toolset": spec.toolset.value,
            "offered_only_when_configured": spec.unavailable is not None,
            "tool": spec.to_mcp().model_dump(mode="json", by_alias=True, exclude_none=True),
        }
        for spec in all_specs()
    ]


def _dump(catalog: list[dict[str, Any]]) -> str:
    return json.dumps(catalog, indent=1, ensure_ascii=False) + "\n"


def test_the_tool_catalog_is_exactly_the_pinned_one() -> None:
    assert _dump(current_catalog()) == GOLDEN.read_text(encoding="utf-8")


if __name__ == "__main__":
    GOLDEN.write_text(_dump(current_catalog()), encoding="utf-8")
