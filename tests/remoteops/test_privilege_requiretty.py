"""sudo's ``Defaults requiretty`` is told apart from "needs a password", against the real sshd and sudo.

``ro-tty`` has a NOPASSWD rule and ``ro-ttypw`` a password rule, both under ``Defaults requiretty`` (a drop-in
of the sshd fixture): sudo refuses them before any authentication, so no human may be asked for a password.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from remoteops import PrivilegeError, PrivilegeSettings, RemoteOps, TargetSpec, TransportSettings
from remoteops._errors import ProbeError
from remoteops._models import Capabilities
from remoteops.privilege.diagnose import strip_lecture, sudo_refusal
from tests.fixtures.sshd import SshdInstance
from tests.remoteops.test_privilege import FixedSecrets

pytestmark = pytest.mark.anyio


def _ops(sshd: SshdInstance, **privilege: Any) -> RemoteOps:
    transport = TransportSettings(ssh_config_file=sshd.ssh_config, control_dir=sshd.control_dir)
    targets = [TargetSpec(name=role, host=sshd.alias(role)) for role in ("tty", "ttypass")]
    return RemoteOps(transport, targets, privilege=PrivilegeSettings(**privilege))


async def test_the_probe_reports_requiretty_for_a_nopasswd_user_not_a_missing_password(
    sshd: SshdInstance,
) -> None:
    async with _ops(sshd) as ops:
        with anyio.fail_after(60):
            caps = await ops.capabilities("tty")
    assert not caps.sudo_nopasswd
    refusal = sudo_refusal(caps.sudo_said or "")
    assert refusal is not None
    assert refusal.kind == "tty_required"


@pytest.mark.parametrize("role", ["tty", "ttypass"])
async def test_requiretty_skips_both_sudo_providers_without_asking_anyone_for_a_password(
    sshd: SshdInstance, role: str
) -> None:
    secrets = FixedSecrets("never-asked")
    async with _ops(sshd, providers=("sudo_nopasswd", "sudo_password")) as ops:
        with anyio.fail_after(60), pytest.raises(PrivilegeError) as info:
            await ops.run(role, ["id", "-u"], privilege="root", secrets=secrets)
    assert info.value.reason == "not_allowed"
    assert [(a.provider, a.outcome) for a in info.value.attempts] == [
        ("sudo_nopasswd", "skipped"),
        ("sudo_password", "skipped"),
    ]
    assert all(a.reason.startswith("tty_required:") for a in info.value.attempts)
    assert all("!requiretty" in a.reason for a in info.value.attempts)
    assert secrets.asked == []


async def test_requiretty_hands_on_to_su_which_gives_root(sshd: SshdInstance) -> None:
    secrets = FixedSecrets(sshd.su_password)
    async with _ops(sshd, su_user=sshd.su_user) as ops:
        with anyio.fail_after(60):
            result = await ops.run("tty", ["id", "-u"], privilege="root", secrets=secrets)
    assert result.stdout.strip() == "0"
    assert result.privilege is not None
    assert result.privilege.provider == "su_password"
    assert [r.account for r in secrets.asked] == [sshd.su_user]


async def test_without_a_probe_the_password_attempt_reports_tty_required_not_refused(
    sshd: SshdInstance,
) -> None:
    async def no_probe(name: str) -> Capabilities:
        raise ProbeError("not probed in this test", target=name)

    secrets = FixedSecrets(sshd.tty_password)
    async with _ops(sshd, providers=("sudo_password",)) as ops:
        ops._escalator._capabilities = no_probe  # the providers are tried blind, as when a probe fails
        with anyio.fail_after(60), pytest.raises(PrivilegeError) as info:
            await ops.run("ttypass", ["id", "-u"], privilege="root", secrets=secrets)
    assert [(a.provider, a.outcome, a.reason) for a in info.value.attempts] == [
        ("sudo_password", "failed", "tty_required")
    ]
    assert "!requiretty" in info.value.attempts[0].detail
    assert sshd.tty_password not in str(info.value)


def test_the_lecture_is_no_refusal_and_is_not_quoted() -> None:
    lecture = (
        "\nWe trust you have received the usual lecture from the local System\nAdministrator. It usually "
        "boils down to these three things:\n\n    #1) Respect the privacy of others.\n    #2) Think before "
        "you type.\n    #3) With great power comes great responsibility.\n\n"
    )
    assert sudo_refusal(lecture) is None
    assert strip_lecture(lecture + "sudo: a password is required") == "sudo: a password is required"


@pytest.mark.parametrize(
    ("said", "kind"),
    [
        ("sudo: sorry, you must have a tty to run sudo", "tty_required"),
        ("sudo: a password is required", "password_required"),
        ("sudo: account validation failure, is your account locked?", "account"),
        ("sudo: PAM account management error: Authentication service cannot retrieve", "account"),
        ("ro-plain is not in the sudoers file.", "not_permitted"),
    ],
)
def test_each_sudo_refusal_is_recognised_for_what_it_is(said: str, kind: str) -> None:
    refusal = sudo_refusal(said)
    assert refusal is not None
    assert refusal.kind == kind
