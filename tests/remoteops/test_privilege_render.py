"""Privileged rendering: any argv still arrives literally behind every provider's words, and the wrapper
refuses to start anything unless it runs as uid 0. Run through the local /bin/sh, sudo and su (as root no
password is asked), the way the target's login shell runs the rendered text."""

from __future__ import annotations

import os
import shlex
import subprocess

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from remoteops import PrivilegeSettings, ProviderName
from remoteops._render import escalation_words, render_command
from remoteops.privilege.wire import Escalation
from tests.fixtures.profiles import examples
from tests.remoteops.test_render import ARGS, expected

LOCAL: list[ProviderName] = ["direct_root", "sudo_nopasswd", "su_password"]
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="sudo -n and su without a password need root")


def _run(text: str, *, as_user: str | None = None) -> subprocess.CompletedProcess[bytes]:
    argv = ["sh", "-c", text] if as_user is None else ["su", "-s", "/bin/sh", as_user, "-c", text]
    return subprocess.run(argv, capture_output=True, timeout=30, check=False, stdin=subprocess.DEVNULL)


@needs_root
@pytest.mark.slow
@settings(max_examples=examples(25), deadline=None)
@given(args=ARGS, provider=st.sampled_from(LOCAL))
def test_any_argv_arrives_literally_behind_every_local_provider(
    args: list[str], provider: ProviderName
) -> None:
    rendered = render_command(
        ["printf", "%s\\0", *args],
        time_limit_s=20,
        escalation=Escalation(provider=provider),
    )
    done = _run(rendered.text)
    assert done.returncode == 0, done.stderr
    assert done.stdout == expected(args).encode()


@needs_root
def test_the_wrapper_starts_nothing_when_the_provider_did_not_give_uid_0() -> None:
    rendered = render_command(
        ["touch", "/tmp/rog-never"], time_limit_s=5, escalation=Escalation("direct_root")
    )
    done = _run(rendered.text, as_user="nobody")
    assert done.returncode == 125
    assert rendered.not_root_marker in done.stderr
    assert rendered.start_marker not in done.stderr


def test_each_provider_puts_its_own_words_before_the_wrapper() -> None:
    inner = ["sh", "-c", "W", "rog"]
    sudo = Escalation("sudo_password")
    assert escalation_words(sudo, inner) == ["exec", "sudo", "-S", "-p", sudo.prompt, "--", *inner]
    assert escalation_words(Escalation("sudo_nopasswd"), inner)[:4] == ["exec", "sudo", "-n", "--"]
    su = escalation_words(Escalation("su_password", su_user="toor"), inner)
    assert su[:5] == ["exec", "su", "-", "toor", "-c"]
    assert shlex.split(su[5]) == ["exec", *inner]
    docker = escalation_words(Escalation("docker_host_root", docker_image="img:1"), inner)
    assert docker[docker.index("img:1") + 1 :] == ["chroot", "/host", *inner]
    assert {"--privileged", "--pid=host", "-v", "/:/host"} <= set(docker)
    assert sudo.prompt != Escalation("sudo_password").prompt  # a fresh prompt per call


def test_the_operators_engine_options_go_before_the_image_one_word_each() -> None:
    inner = ["sh", "-c", "W", "rog"]
    extra = ("--runtime=runc", "--ulimit=nproc=1024:1024", "--label=a b;$(x)")
    docker = escalation_words(
        Escalation("docker_host_root", docker_image="img:1", docker_run_args=extra), inner
    )
    image = docker.index("img:1")
    assert tuple(docker[image - 3 : image]) == extra  # verbatim words, never split or interpreted
    assert docker[image + 1 :] == ["chroot", "/host", *inner]


@pytest.mark.parametrize("bad", ["runc", "", "-x\x00y", "-" + "x" * 300])
def test_an_engine_option_that_is_not_one_option_word_is_refused_by_the_settings(bad: str) -> None:
    with pytest.raises(ValidationError):
        PrivilegeSettings(docker_run_args=(bad,))
