"""The OAuth page (docs/oauth.md, moved there from the README) is a contract too: every TOML example in it
loads into the gateway's Settings exactly as written (through the real loader), and its scope table is the
code's default scope mapping."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

import pytest

from gateway.config import DEFAULT_SCOPES, load_settings

ROOT = Path(__file__).resolve().parents[2]
OAUTH_PAGE = ROOT / "docs" / "oauth.md"


def _oauth_section() -> str:
    text = OAUTH_PAGE.read_text(encoding="utf-8")
    assert text.startswith("# OAuth and least privilege\n"), "docs/oauth.md is not the OAuth page"
    return text


TOML_BLOCKS = re.findall(r"^```toml\n(.*?)^```", _oauth_section(), re.DOTALL | re.MULTILINE)


def _holds(written: Any, loaded: Any, where: str) -> None:
    """Every value the example writes is what the loaded settings hold (nothing dropped or changed)."""
    if isinstance(written, dict):
        assert isinstance(loaded, dict), where
        for key, value in written.items():
            assert key in loaded, f"{where}.{key} is not in the loaded settings"
            _holds(value, loaded[key], f"{where}.{key}")
    elif isinstance(written, list):
        assert isinstance(loaded, list), where
        assert len(written) == len(loaded), where
        for index, (w, got) in enumerate(zip(written, loaded, strict=True)):
            _holds(w, got, f"{where}[{index}]")
    else:
        assert written == loaded, f"{where}: README writes {written!r}, the settings hold {loaded!r}"


def test_the_oauth_section_has_its_toml_examples() -> None:
    assert len(TOML_BLOCKS) >= 2  # the JWT authorization server and the trusted proxy


@pytest.mark.parametrize("block", TOML_BLOCKS, ids=[f"block{i}" for i in range(len(TOML_BLOCKS))])
def test_every_toml_example_of_the_oauth_section_loads_into_the_settings(tmp_path: Path, block: str) -> None:
    config = tmp_path / "gateway.toml"
    config.write_text(f'state_dir = "{tmp_path / "state"}"\n{block}', encoding="utf-8")
    settings = load_settings(config, environ={})
    _holds(tomllib.loads(block), settings.model_dump(mode="json"), "")


def _scope_table() -> dict[str, tuple[str, ...]]:
    rows = re.findall(r"^\| `(remoteops:[a-z]+)` \| (.*) \|$", _oauth_section(), re.MULTILINE)
    table: dict[str, tuple[str, ...]] = {}
    for scope, opens in rows:
        # the toolsets are the backticked names before any parenthesis (which lists example tools)
        table[scope] = tuple(re.findall(r"`([a-z]+)`", opens.split("(")[0]))
    return table


def test_the_oauth_page_scope_table_is_the_default_scope_mapping() -> None:
    assert _scope_table() == dict(DEFAULT_SCOPES)
