"""Target labels and named groups in the configuration: loaded from TOML as written; bad input is a
``ConfigError`` naming the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway._errors import ConfigError
from gateway.config import Settings, load_settings
from remoteops import LabelMatch, Selector, resolve_selector

GOOD = """
[[targets]]
name = "web1"
host = "web1"
labels = { role = "web", env = "prod" }

[[targets]]
name = "db1"
host = "db1"
labels = { role = "db", env = "prod" }

[groups]
web = [{ labels = { role = "web" } }]
prod = ["db1", { labels = { env = "prod" } }]
"""


def _load(tmp_path: Path, text: str) -> Settings:
    path = tmp_path / "gateway.toml"
    path.write_text(text, encoding="utf-8")
    return load_settings(path, environ={})


def test_labels_and_groups_load_as_written_and_resolve(tmp_path: Path) -> None:
    settings = _load(tmp_path, GOOD)
    assert settings.targets[0].labels == {"role": "web", "env": "prod"}
    groups = settings.groups
    assert groups["web"] == (LabelMatch(labels={"role": "web"}),)
    got = resolve_selector(Selector(group="prod"), settings.targets, groups)
    assert got.selected == ("db1", "web1")


@pytest.mark.parametrize(
    ("extra", "key"),
    [
        ('[groups]\nweb = ["web9"]\n', "groups"),
        ("[groups]\nweb = [{ labels = {} }]\n", "groups.web.0"),
        ('[groups]\nweb = [{ lables = { role = "web" } }]\n', "groups.web.0"),
        ('[groups]\n"bad name" = ["web1"]\n', "groups.bad name"),
        ("[fleet]\nforks = 100\nmax_forks = 10\n", "fleet"),
        ("[fleet]\nforkz = 1\n", "fleet.forkz"),
    ],
)
def test_bad_groups_and_fleet_settings_name_the_key(tmp_path: Path, extra: str, key: str) -> None:
    with pytest.raises(ConfigError) as info:
        _load(tmp_path, GOOD.split("[groups]")[0] + extra)
    assert any((problem.key or "").startswith(key) for problem in info.value.problems), info.value


def test_a_label_key_with_a_space_names_the_target_key(tmp_path: Path) -> None:
    text = '[[targets]]\nname = "a"\nhost = "a"\nlabels = { "ro le" = "x" }\n'
    with pytest.raises(ConfigError) as info:
        _load(tmp_path, text)
    assert (info.value.key or "").startswith("targets.0.labels")
