"""The privilege choice point against the real sshd, real sudo and real su (no mocks).

Users (tests/fixtures/sshd.py): ``ro-sudo`` has NOPASSWD sudo, ``ro-pass`` sudo with a password, ``ro-plain``
no sudo but may ``su - ro-toor`` (a uid-0 account with a password), ``root`` logs in as uid 0.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from remoteops import (
    PrivilegeError,
    PrivilegeSettings,
    RemoteOps,
    SecretRequest,
    SecretRequired,
    TargetSpec,
    TransportSettings,
)
from tests.fixtures.sshd import SshdInstance

pytestmark = pytest.mark.anyio


class FixedSecrets:
    """A secret source answering every request with one password (what a human typed), counting asks."""

    def __init__(self, password: str) -> None:
        self.password = password
        self.asked: list[SecretRequest] = []

    async def obtain(self, request: SecretRequest) -> bytearray:
        self.asked.append(request)
        return bytearray(self.password.encode())


def _ops(sshd: SshdInstance, **privilege: Any) -> RemoteOps:
    transport = TransportSettings(ssh_config_file=sshd.ssh_config, control_dir=sshd.control_dir)
    targets = [TargetSpec(name=role, host=sshd.alias(role)) for role in ("plain", "sudo", "pass", "root")]
    return RemoteOps(transport, targets, privilege=PrivilegeSettings(**privilege))


async def test_nopasswd_sudo_user_runs_as_root_through_sudo_nopasswd(sshd: SshdInstance) -> None:
    async with _ops(sshd) as ops:
        with anyio.fail_after(60):
            result = await ops.run("sudo", ["id", "-u"], privilege="root")
    assert result.exit_code == 0
    assert result.stdout.strip() == "0"
    assert result.privilege is not None
    assert result.privilege.provider == "sudo_nopasswd"
    assert result.privilege.ran_as == "root"
    outcomes = [(a.provider, a.outcome) for a in result.privilege.attempts]
    assert outcomes == [("direct_root", "skipped"), ("sudo_nopasswd", "ran")]
    assert ops.preferred_provider("sudo") == "sudo_nopasswd"


async def test_root_login_runs_through_direct_root(sshd: SshdInstance) -> None:
    async with _ops(sshd) as ops:
        with anyio.fail_after(60):
            result = await ops.run("root", ["id", "-u"], privilege="root")
    assert result.stdout.strip() == "0"
    assert result.privilege is not None
    assert result.privilege.provider == "direct_root"


async def test_password_sudo_feeds_the_password_after_the_prompt_and_the_payload_after_the_start(
    sshd: SshdInstance,
) -> None:
    secrets = FixedSecrets(sshd.pass_password)
    async with _ops(sshd) as ops:
        with anyio.fail_after(60):
            result = await ops.run(
                "pass", ["sh", "-c", "id -u; cat"], stdin=b"payload-line\n", privilege="root", secrets=secrets
            )
    assert result.exit_code == 0
    assert result.stdout == "0\npayload-line\n"
    assert sshd.pass_password not in result.stderr
    assert "rog-sudo" not in result.stderr  # the prompt is not part of the command's output
    assert result.privilege is not None
    assert result.privilege.provider == "sudo_password"
    assert [r.account for r in secrets.asked] == ["ro-pass"]
    assert [r.provider for r in secrets.asked] == ["sudo_password"]


async def test_process_list_while_sudo_waits_never_shows_the_password(
    sshd: SshdInstance, shared_dir: Path
) -> None:
    """The command runs as root under the waiting sudo and captures every argv and environment there, into a
    file: the whole list (already over the 64 KiB output cap here, and bigger on a busier machine), not the
    head and tail of it that a result keeps."""
    secrets = FixedSecrets(sshd.pass_password)
    listing = shared_dir / "processes"
    capture = (
        '{ ps -eww -o pid,args; for f in /proc/[0-9]*/environ /proc/[0-9]*/cmdline; do cat "$f"; echo; '
        'done; } >"$1" 2>/dev/null; echo captured'
    )
    async with _ops(sshd, providers=("sudo_password",)) as ops:
        with anyio.fail_after(60):
            result = await ops.run(
                "pass", ["sh", "-c", capture, "capture", str(listing)], privilege="root", secrets=secrets,
                timeout_s=30,
            )  # fmt: skip
    assert (result.exit_code, result.stdout) == (0, "captured\n")
    processes = listing.read_bytes()
    assert b"sudo -S -p [rog-sudo-" in processes  # the waiting sudo was in the list
    assert sshd.pass_password.encode() not in processes
    assert sshd.pass_password not in result.stderr


async def test_su_password_gives_root_from_a_user_without_sudo(sshd: SshdInstance) -> None:
    secrets = FixedSecrets(sshd.su_password)
    async with _ops(sshd, providers=("sudo_nopasswd", "su_password"), su_user=sshd.su_user) as ops:
        with anyio.fail_after(60):
            result = await ops.run(
                "plain", ["sh", "-c", "id -u; cat"], stdin=b"in\n", privilege="root", secrets=secrets
            )
    assert result.stdout == "0\nin\n"
    assert result.privilege is not None
    assert result.privilege.provider == "su_password"
    assert [(a.provider, a.outcome) for a in result.privilege.attempts] == [
        ("sudo_nopasswd", "skipped"),
        ("su_password", "ran"),
    ]
    assert [r.account for r in secrets.asked] == [sshd.su_user]


@pytest.mark.slow
@pytest.mark.parametrize(("target", "provider"), [("pass", "sudo_password"), ("plain", "su_password")])
async def test_wrong_password_is_a_privilege_error_that_echoes_nothing(
    sshd: SshdInstance, target: str, provider: str
) -> None:
    planted = "Wr0ng-planted-" + "x7" * 6
    async with _ops(sshd, providers=(provider,), su_user=sshd.su_user) as ops:
        with anyio.fail_after(60), pytest.raises(PrivilegeError) as info:
            await ops.run(target, ["id", "-u"], privilege="root", secrets=FixedSecrets(planted))
    assert info.value.reason == "wrong_password"
    assert planted not in str(info.value)
    assert [(a.provider, a.outcome, a.reason) for a in info.value.attempts] == [
        (provider, "failed", "wrong_password")
    ]


async def test_no_enabled_provider_is_a_privilege_error_listing_every_skip(sshd: SshdInstance) -> None:
    async with _ops(sshd, providers=("direct_root", "sudo_nopasswd")) as ops:
        with anyio.fail_after(60), pytest.raises(PrivilegeError) as info:
            await ops.run("plain", ["id", "-u"], privilege="root")
    assert info.value.reason == "not_allowed"
    assert [(a.provider, a.outcome) for a in info.value.attempts] == [
        ("direct_root", "skipped"),
        ("sudo_nopasswd", "skipped"),
    ]


async def test_password_attempts_are_rate_limited_per_target(sshd: SshdInstance) -> None:
    planted = "Wr0ng-rate-" + "y5" * 6
    async with _ops(sshd, providers=("sudo_password",), password_attempts=1) as ops:
        with anyio.fail_after(60):
            with pytest.raises(PrivilegeError) as first:
                await ops.run("pass", ["true"], privilege="root", secrets=FixedSecrets(planted))
            secrets = FixedSecrets(sshd.pass_password)
            with pytest.raises(PrivilegeError) as second:
                await ops.run("pass", ["true"], privilege="root", secrets=secrets)
    assert first.value.reason == "wrong_password"
    assert second.value.reason == "rate_limited"
    assert secrets.asked == []  # refused before anyone was asked


async def test_auto_escalates_only_after_an_observed_permission_denial(sshd: SshdInstance) -> None:
    async with _ops(sshd) as ops:
        with anyio.fail_after(60):
            plain = await ops.run("sudo", ["id", "-u"], privilege="auto")
            denied = await ops.run("sudo", ["head", "-c", "4", "/etc/shadow"], privilege="auto")
            failing = await ops.run("sudo", ["sh", "-c", "exit 3"], privilege="auto")
    assert plain.stdout.strip() != "0"
    assert plain.privilege is not None
    assert plain.privilege.ran_as == "user"
    assert plain.privilege.attempts == ()
    assert denied.exit_code == 0
    assert denied.stdout == "root"
    assert denied.privilege is not None
    assert denied.privilege.escalated_after_denial
    assert denied.privilege.attempts[0].provider == "user"
    assert denied.privilege.attempts[0].outcome == "denied"
    assert "Permission denied" in denied.privilege.attempts[0].reason
    assert failing.exit_code == 3  # a failure that is no permission denial never escalates
    assert failing.privilege is not None
    assert failing.privilege.ran_as == "user"


async def test_user_privilege_never_escalates(sshd: SshdInstance) -> None:
    async with _ops(sshd) as ops:
        with anyio.fail_after(60):
            result = await ops.run("sudo", ["head", "-c", "4", "/etc/shadow"])
    assert result.exit_code != 0
    assert result.privilege is None


class NobodyEnteredIt:
    async def obtain(self, request: SecretRequest) -> bytearray:
        raise SecretRequired(
            "enter it on the page", account=request.account, entry="http://127.0.0.1:1/secret/x", expires_s=1
        )


async def test_asking_a_human_for_the_password_uses_up_no_attempt(sshd: SshdInstance) -> None:
    async with _ops(sshd, providers=("sudo_password",), password_attempts=1) as ops:
        for _ in range(3):
            with anyio.fail_after(60), pytest.raises(SecretRequired) as info:
                await ops.run("pass", ["true"], privilege="root", secrets=NobodyEnteredIt())
            assert info.value.attempts[-1].reason == "secret_required"
        secrets = FixedSecrets(sshd.pass_password)
        with anyio.fail_after(60):
            result = await ops.run("pass", ["id", "-u"], privilege="root", secrets=secrets)
    assert result.stdout.strip() == "0"


class DeclinesFor:
    """An askpass-like source: no password for ``provider`` (declined), ``password`` for every other."""

    def __init__(self, provider: str, password: str) -> None:
        self.provider = provider
        self.password = password
        self.asked: list[str] = []

    async def obtain(self, request: SecretRequest) -> bytearray:
        self.asked.append(request.provider)
        if request.provider == self.provider:
            raise PrivilegeError("the askpass command gave no password", reason="declined")
        return bytearray(self.password.encode())


async def test_a_provider_without_a_password_hands_on_to_the_next_configured_provider(
    sshd: SshdInstance,
) -> None:
    secrets = DeclinesFor("sudo_password", sshd.su_password)
    async with _ops(sshd, providers=("sudo_password", "su_password"), su_user=sshd.su_user) as ops:
        with anyio.fail_after(60):
            result = await ops.run("plain", ["id", "-u"], privilege="root", secrets=secrets)
    assert result.stdout.strip() == "0"
    assert result.privilege is not None
    assert result.privilege.provider == "su_password"
    assert [(a.provider, a.outcome, a.reason) for a in result.privilege.attempts] == [
        ("sudo_password", "failed", "declined"),
        ("su_password", "ran", ""),
    ]
    assert secrets.asked == ["sudo_password", "su_password"]


async def test_when_every_provider_fails_the_error_names_every_attempt_with_its_reason(
    sshd: SshdInstance,
) -> None:
    secrets = DeclinesFor("su_password", "unused")
    async with _ops(
        sshd, providers=("sudo_nopasswd", "su_password", "direct_root"), su_user=sshd.su_user
    ) as ops:
        with anyio.fail_after(60), pytest.raises(PrivilegeError) as info:
            await ops.run("plain", ["id", "-u"], privilege="root", secrets=secrets)
    assert info.value.reason == "not_allowed"
    assert [(a.provider, a.outcome) for a in info.value.attempts] == [
        ("sudo_nopasswd", "skipped"),
        ("su_password", "failed"),
        ("direct_root", "skipped"),
    ]
    assert info.value.attempts[1].reason == "declined"
    assert all(a.reason for a in info.value.attempts)
