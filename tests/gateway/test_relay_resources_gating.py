"""The gating rules of relayed resources and prompts, on the pure functions that decide them: URI template
matching (RFC 6570 operators), include/exclude by URI template / URI / prompt name, collisions."""

from __future__ import annotations

import mcp_types as types
import pytest

from gateway.config import UpstreamEntry
from gateway.relay.surface import Taken, build_surface_view
from gateway.relay.uritemplate import TemplateError, matches
from upstream import UpstreamSettings

CONTENT = "tmux://panes/{pane_id}/content{?socket_name}"
PANE = "tmux://panes/{pane_id}{?socket_name}"


@pytest.mark.parametrize(
    ("template", "uri", "expected"),
    [
        ("tmux://sessions{?socket_name}", "tmux://sessions", True),
        ("tmux://sessions{?socket_name}", "tmux://sessions?socket_name=a", True),
        (PANE, "tmux://panes/%1", True),
        (PANE, "tmux://panes/%1/content", False),  # a simple expression never spans a "/"
        (CONTENT, "tmux://panes/%1/content", True),
        ("file:///{+path}", "file:///etc/ssh/sshd_config", True),
        ("file:///{path}", "file:///etc/ssh/sshd_config", False),
        ("x://a{/segments*}", "x://a/b/c", True),
        ("x://a{#frag}", "x://a#top", True),
        ("x://a.{ext}", "x://a.b", True),
        ("x://literal", "x://literal/", False),
        ("x://a{.}", "x://a", None),  # malformed: raises
    ],
)
def test_a_uri_matches_a_template_exactly_when_its_operators_can_expand_to_it(
    template: str, uri: str, expected: bool | None
) -> None:
    if expected is None:
        with pytest.raises(TemplateError):
            matches(template, uri)
    else:
        assert matches(template, uri) is expected


def entry(**gating: object) -> UpstreamEntry:
    settings = UpstreamSettings(name="tmux", transport="stdio", command=["libtmux-mcp"])
    return UpstreamEntry.model_validate({"connection": settings, **gating})


def template(uri_template: str) -> types.ResourceTemplate:
    return types.ResourceTemplate(uri_template=uri_template, name=uri_template)


def prompt(name: str) -> types.Prompt:
    return types.Prompt(name=name)


def test_an_excluded_template_refuses_its_uris_and_the_resources_it_matches_but_not_its_siblings() -> None:
    resources = [
        types.Resource(uri="tmux://panes/%1/content", name="c"),
        types.Resource(uri="tmux://x", name="x"),
    ]
    view = build_surface_view(
        entry(exclude=[CONTENT]),
        0,
        resources=resources,
        templates=[template(CONTENT), template(PANE)],
        prompts=[],
        taken=Taken(),
    )
    assert [t.uri_template for t in view.templates] == [PANE]
    assert [r.uri for r in view.resources] == ["tmux://x"]
    assert view.refuses("tmux://panes/%1/content")
    assert not view.refuses("tmux://panes/%1")
    assert view.template_serves("tmux://panes/%1")
    assert {(d["kind"], d["reason"]) for d in view.dropped} == {
        ("resource_template", "excluded"),
        ("resource", "matches a filtered template"),
    }


def test_an_include_list_serves_only_the_named_prompts_and_templates() -> None:
    view = build_surface_view(
        entry(include=["run_and_wait", PANE]),
        0,
        resources=[],
        templates=[template(CONTENT), template(PANE)],
        prompts=[prompt("run_and_wait"), prompt("build_dev_workspace")],
        taken=Taken(),
    )
    assert [p.name for p in view.prompts] == ["run_and_wait"]
    assert [t.uri_template for t in view.templates] == [PANE]
    assert view.refuses("tmux://panes/%1/content")


def test_a_prompt_taken_by_an_earlier_upstream_is_dropped_or_renamed_and_a_prefix_applies_to_names() -> None:
    taken = Taken(prompts={"greet": "one"}, templates={PANE: "one"})
    dropped = build_surface_view(
        entry(), 1, resources=[], templates=[template(PANE)], prompts=[prompt("greet")], taken=taken
    )
    renamed = build_surface_view(
        entry(on_collision="prefix_upstream"),
        1,
        resources=[],
        templates=[],
        prompts=[prompt("greet")],
        taken=taken,
    )
    prefixed = build_surface_view(
        entry(prefix="term_"), 1, resources=[], templates=[], prompts=[prompt("greet")], taken=taken
    )
    assert dropped.prompts == []
    assert dropped.templates == []  # a URI template cannot be renamed: always dropped
    assert [p.name for p in renamed.prompts] == ["upstream_greet"]
    assert renamed.prompt_routes["upstream_greet"].original_name == "greet"
    assert [p.name for p in prefixed.prompts] == ["term_greet"]
    assert prefixed.renamed == [{"kind": "prompt", "name": "greet", "exposed_as": "term_greet"}]
