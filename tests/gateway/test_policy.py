"""The one policy object: principals from tokens, scopes → toolsets, grants → targets; the auth settings."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from mcp.server.auth.provider import AccessToken
from pydantic import ValidationError

from gateway._errors import ConfigError, ErrorCode, ToolFailure
from gateway.auth.policy import GROUPS_CLAIM, KIND_CLAIM, Policy, Principal
from gateway.config import AuthSettings, OAuthSettings, Settings, load_settings

STDIO = Principal.operator("stdio", "stdio:1000")


def _policy(**auth: Any) -> Policy:
    return Policy.from_settings(AuthSettings.model_validate(auth))


def _oauth(subject: str, scopes: list[str], groups: list[str] | None = None) -> AccessToken:
    claims = {KIND_CLAIM: "oauth", GROUPS_CLAIM: groups or []}
    return AccessToken(token="t", client_id="c", scopes=scopes, subject=subject, claims=claims)


def test_a_static_bearer_token_and_stdio_are_the_unrestricted_operator() -> None:
    policy = _policy(grants=[{"subject": "alice", "targets": ["t1"]}])
    static = AccessToken(token="t", client_id="operator", scopes=[], claims={KIND_CLAIM: "bearer"})
    bearer = policy.principal(static, STDIO)
    assert bearer.label == "bearer:operator"
    for who in (bearer, policy.principal(None, STDIO)):
        assert policy.toolsets(who) is None
        assert policy.allows_target(who, "anything")
    assert policy.principal(None, STDIO).label == "stdio:1000"


def test_a_token_that_does_not_say_how_it_was_verified_is_restricted_to_its_scopes() -> None:
    policy = _policy()
    who = policy.principal(AccessToken(token="t", client_id="c", scopes=["remoteops:inspect"]), STDIO)
    assert policy.toolsets(who) == frozenset({"inspect"})


def test_scopes_map_to_toolsets_by_the_default_table() -> None:
    policy = _policy()
    who = policy.principal(_oauth("alice", ["remoteops:inspect", "remoteops:teardown", "other"]), STDIO)
    assert (who.kind, who.subject, who.client_id) == ("oauth", "alice", "c")
    assert policy.toolsets(who) == frozenset({"inspect", "teardown"})
    with pytest.raises(ToolFailure) as denied:
        policy.check_call(who, tool="remote_exec", toolset="execute", target=None)
    assert denied.value.code is ErrorCode.POLICY_DENIED


def test_the_scope_table_is_configurable() -> None:
    policy = _policy(scopes={"ops": ["inspect", "execute", "upstream"]})
    who = policy.principal(_oauth("alice", ["ops", "remoteops:root"]), STDIO)
    assert policy.toolsets(who) == frozenset({"inspect", "execute", "upstream"})  # the defaults are replaced


def test_grants_restrict_targets_by_subject_or_group_and_fail_closed() -> None:
    policy = _policy(
        grants=[{"subject": "alice", "targets": ["t1"]}, {"group": "web", "targets": ["t2", "t3"]}]
    )
    alice = policy.principal(_oauth("alice", [], ["web"]), STDIO)
    nobody = policy.principal(_oauth("carol", []), STDIO)
    assert policy.targets(alice) == frozenset({"t1", "t2", "t3"})
    assert policy.visible_targets(nobody, ["t1", "t2"]) == []
    with pytest.raises(ToolFailure) as denied:
        policy.check_call(nobody, tool="target_diagnose", toolset="inspect", target="t1")
    assert denied.value.code is ErrorCode.POLICY_DENIED


def test_without_grants_every_target_is_reachable_within_the_scopes() -> None:
    policy = _policy()
    who = policy.principal(_oauth("alice", ["remoteops:inspect"]), STDIO)
    policy.check_call(who, tool="target_diagnose", toolset="inspect", target="t9")
    assert policy.targets(who) is None


def test_oauth_mode_needs_an_issuer_and_a_way_to_check_tokens() -> None:
    for auth in ({"mode": "oauth"}, {"mode": "oauth", "oauth": {"issuer": "https://idp.test"}}):
        with pytest.raises(ValidationError):
            Settings.model_validate({"auth": auth})


@pytest.mark.parametrize("algorithms", [["none"], ["HS256"], ["RS256", "none"], []])
def test_alg_none_and_shared_secret_algorithms_cannot_be_configured(algorithms: list[str]) -> None:
    with pytest.raises(ValidationError):
        OAuthSettings(algorithms=tuple(algorithms))


def test_a_trusted_proxy_peer_must_be_a_loopback_address() -> None:
    for peer in ("10.0.0.1", "proxy.example.net"):
        with pytest.raises(ValidationError):
            AuthSettings.model_validate({"trusted_proxy": {"peers": [peer]}})


def test_trusted_proxy_peers_need_a_shared_secret() -> None:
    with pytest.raises(ValidationError):
        AuthSettings.model_validate({"trusted_proxy": {"peers": ["127.0.0.1"]}})


def test_a_grant_names_exactly_one_of_subject_or_group() -> None:
    for grant in ({"targets": ["t1"]}, {"subject": "a", "group": "b", "targets": ["t1"]}):
        with pytest.raises(ValidationError):
            AuthSettings.model_validate({"grants": [grant]})


def test_oauth_urls_must_be_https_unless_loopback(tmp_path: Path) -> None:
    OAuthSettings(issuer="http://127.0.0.1:9000", jwks_url="https://idp.test/jwks")
    config = tmp_path / "gateway.toml"
    config.write_text(
        '[auth]\nmode = "oauth"\n[auth.oauth]\nissuer = "https://idp.test"\njwks_url = "http://idp.test/jwks"\n',
        encoding="utf-8",
    )
    with pytest.raises(ConfigError) as refused:
        load_settings(config, environ={})
    assert refused.value.key == "auth.oauth.jwks_url"


def test_a_scope_challenge_keeps_the_callers_scopes_and_adds_the_narrowest_scope_for_the_toolset() -> None:
    table = {"ops": ["inspect", "execute", "upstream"], "run": ["execute"], "look": ["inspect"]}
    policy = _policy(scopes=table)
    who = policy.principal(_oauth("alice", ["look", "unknown-scope"]), STDIO)
    assert policy.scope_challenge(who, "execute") == ("look", "run")  # "run" opens fewer toolsets than "ops"
    assert policy.scope_challenge(who, "inspect") is None  # reached already: nothing to step up to
    assert policy.scope_challenge(who, "root") is None  # no scope opens it: policy_denied, not a 403


def test_equally_narrow_scopes_are_challenged_in_table_order() -> None:
    policy = _policy(scopes={"b-exec": ["execute"], "a-exec": ["execute"]})
    who = policy.principal(_oauth("alice", []), STDIO)
    assert policy.scope_challenge(who, "execute") == ("b-exec",)


def test_only_oauth_token_holders_are_challenged_to_step_up() -> None:
    policy = _policy()
    proxied = AccessToken(
        token="t", client_id="proxy", scopes=[], subject="dave", claims={KIND_CLAIM: "proxy"}
    )
    static = AccessToken(token="t", client_id="operator", scopes=[], claims={KIND_CLAIM: "bearer"})
    for token in (proxied, static, None):
        assert policy.scope_challenge(policy.principal(token, STDIO), "execute") is None
