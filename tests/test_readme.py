"""The README is a contract: its two commands, its tool catalog, its error and configuration tables match the
code."""

from __future__ import annotations

import re
import typing
from pathlib import Path

from pydantic import BaseModel

from gateway._errors import ERROR_DESCRIPTIONS, ErrorCode
from gateway.cli import catalog_markdown
from gateway.config import Settings
from gateway.tools import all_specs

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def _section(name: str) -> str:
    match = re.search(rf"<!-- {name}:start -->\n(.*?)\n<!-- {name}:end -->", README, re.DOTALL)
    assert match, f"README has no {name} section"
    return match.group(1).strip()


def test_quick_start_is_exactly_two_commands_and_ci_runs_the_test_one() -> None:
    block = _section("quickstart")
    commands = [line for line in block.splitlines() if line and not line.startswith(("```", "#"))]
    assert commands == ["./ops/demo.sh", "./ops/test.sh"]
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert "\n./ops/test.sh\n" in ci


def test_tool_catalog_in_readme_matches_the_code() -> None:
    assert _section("catalog") == catalog_markdown(all_specs()), (
        "regenerate with: .venv/bin/remoteops-gateway tools --markdown"
    )


def test_error_table_in_readme_matches_the_vocabulary() -> None:
    rows = [line for line in _section("errors").splitlines() if line.startswith("| `")]
    documented = [re.match(r"\| `([a-z_]+)` \| (yes|no) \|", row) for row in rows]
    assert all(documented), rows
    pairs = [(m.group(1), m.group(2) == "yes") for m in documented if m]
    assert pairs == [(code.value, ERROR_DESCRIPTIONS[code][0]) for code in ErrorCode]


def _settings_keys(model: type[BaseModel], prefix: str = "") -> set[str]:
    """Every leaf key of the settings models, dotted; arrays of tables as ``name[].key``."""
    keys: set[str] = set()
    for name, field in model.model_fields.items():
        annotation = field.annotation
        args = typing.get_args(annotation)
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            keys |= _settings_keys(annotation, f"{prefix}{name}.")
        elif typing.get_origin(annotation) is tuple and args and _is_model(args[0]):
            keys |= _settings_keys(args[0], f"{prefix}{name}[].")
        else:
            keys.add(prefix + name)
    return keys


def _is_model(value: object) -> bool:
    return isinstance(value, type) and issubclass(value, BaseModel)


def test_configuration_table_lists_every_settings_key() -> None:
    rows = [line for line in _section("config").splitlines() if line.startswith("| `")]
    documented: list[str] = []
    for row in rows:
        first_cell = row.split("|")[1]
        documented.extend(re.findall(r"`([^`]+)`", first_cell))
    assert len(documented) == len(set(documented)), "a key is documented twice"
    keys = _settings_keys(Settings)
    assert set(documented) - keys == set(), "documented keys the settings models do not have"
    assert keys - set(documented) == set(), "settings keys missing from the README configuration table"
