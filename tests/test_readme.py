"""The README and the documentation pages are a contract: the README's two commands and its tool catalog, the
error page's table (docs/errors.md) and the configuration page's key table (docs/configuration.md) match the
code, and the README stays a front page (at most 200 lines, every relative link resolving)."""

from __future__ import annotations

import re
import typing
from pathlib import Path

from pydantic import BaseModel

from gateway._errors import ERROR_DESCRIPTIONS, ErrorCode
from gateway.cli import catalog_markdown
from gateway.config import Settings, load_settings
from gateway.tools import all_specs

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
README_MAX_LINES = 200


def _section(name: str, page: str = "README.md") -> str:
    text = README if page == "README.md" else (ROOT / page).read_text(encoding="utf-8")
    match = re.search(rf"<!-- {name}:start -->\n(.*?)\n<!-- {name}:end -->", text, re.DOTALL)
    assert match, f"{page} has no {name} section"
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


def test_the_error_page_table_is_the_vocabulary_with_its_retryability_and_meaning() -> None:
    rows = [line for line in _section("errors", "docs/errors.md").splitlines() if line.startswith("| `")]
    documented = [re.match(r"\| `([a-z_]+)` \| (yes|no) \| (.*) \|$", row) for row in rows]
    assert all(documented), rows
    triples = [(m.group(1), m.group(2) == "yes", m.group(3)) for m in documented if m]
    assert triples == [(code.value, *ERROR_DESCRIPTIONS[code]) for code in ErrorCode]


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


def test_the_configuration_page_lists_every_settings_key() -> None:
    table = _section("config", "docs/configuration.md")
    rows = [line for line in table.splitlines() if line.startswith("| `")]
    documented: list[str] = []
    for row in rows:
        first_cell = row.split("|")[1]
        documented.extend(re.findall(r"`([^`]+)`", first_cell))
    assert len(documented) == len(set(documented)), "a key is documented twice"
    keys = _settings_keys(Settings)
    assert set(documented) - keys == set(), "documented keys the settings models do not have"
    assert keys - set(documented) == set(), "settings keys missing from docs/configuration.md"


def test_the_readme_is_a_front_page_of_at_most_200_lines() -> None:
    assert len(README.splitlines()) <= README_MAX_LINES, "move detail to a page under docs/"


def test_every_relative_link_of_the_readme_and_the_docs_names_a_file_that_exists() -> None:
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    broken = []
    for page in pages:
        text = re.sub(r"^```.*?^```", "", page.read_text(encoding="utf-8"), flags=re.DOTALL | re.MULTILINE)
        for target in re.findall(r"(?<!!)\[[^\]\n]+\]\(([^)\s]+)\)", text):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
                continue
            if not (page.parent / target.partition("#")[0]).exists():
                broken.append(f"{page.relative_to(ROOT)}: {target}")
    assert broken == []


def test_the_readme_configuration_example_loads_into_the_settings_as_written(tmp_path: Path) -> None:
    blocks = re.findall(r"^```toml\n(.*?)^```", README, re.DOTALL | re.MULTILINE)
    assert len(blocks) == 1
    config = tmp_path / "gateway.toml"
    config.write_text(f'state_dir = "{tmp_path / "state"}"\n{blocks[0]}', encoding="utf-8")
    settings = load_settings(config, environ={})
    assert [(t.name, t.host) for t in settings.targets] == [("web1", "web1")]
    (upstream,) = settings.upstreams
    assert list(upstream.connection.command or ()) == ["libtmux-mcp"]
    assert upstream.connection.env == {"LIBTMUX_SOCKET": "agents", "FASTMCP_LOG_LEVEL": "WARNING"}
