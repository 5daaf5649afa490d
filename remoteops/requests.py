"""Requests and the argument rules they share, each written once.

A command for a target is given as ``argv`` xor ``shell``, with an optional ``cwd`` and ``env`` whose names
are shell variable names; a time limit lies within a configured ceiling. :class:`CommandRequest` is that
request as a strict pydantic model (unknown fields refused): the gateway's tool arguments are this model,
or a subclass of it adding what only the tool takes. The library's own entry points (``RemoteOps.run``,
``RemoteTasks.start``, the one rendering function) apply the same rules through the functions below, which
raise :class:`~remoteops.InvalidRequest` naming the field. Inside a model's validator that error is a
``ValueError`` like any other: pydantic reports it at the field it validates.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Annotated, Self

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from remoteops._errors import InvalidRequest

__all__ = [
    "ENV_NAME",
    "CommandBody",
    "CommandRequest",
    "RequestModel",
    "TargetName",
    "check_argv",
    "check_env",
    "check_env_name",
    "check_pattern_line",
    "check_text",
    "check_time_limit",
    "command_words",
    "shown_name",
]

ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
"""An environment variable name a POSIX shell can export."""

TargetName = Annotated[str, Field(min_length=1, max_length=128, description="A configured target name.")]


class RequestModel(BaseModel):
    """Base of every request model: unknown fields are refused; a request is a value."""

    model_config = ConfigDict(extra="forbid", frozen=True)


def shown_name(name: str) -> str:
    """A bounded, printable rendering of an arbitrary name (for a field such as ``env.NAME``)."""
    return ascii(name)[1:-1][:64]


def check_text(field: str, value: str, *, target: str | None = None) -> None:
    """A word that can travel to a target: no NUL byte, valid UTF-8 (no lone surrogate)."""
    if "\0" in value:
        raise InvalidRequest(target=target, field=field, reason="contains a NUL byte")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        reason = "is not valid UTF-8 (lone surrogate)"
        raise InvalidRequest(target=target, field=field, reason=reason) from None


def check_argv(argv: Sequence[str], *, target: str | None = None) -> None:
    """Words that can be run: at least one, a non-empty program name, every word a word that can travel."""
    if not argv:
        raise InvalidRequest(target=target, field="argv", reason="must not be empty")
    if argv[0] == "":
        raise InvalidRequest(target=target, field="argv[0]", reason="the program name must not be empty")
    for index, word in enumerate(argv):
        check_text(f"argv[{index}]", word, target=target)


def check_env_name(name: str, *, target: str | None = None) -> None:
    """``name`` matches ``^[A-Za-z_][A-Za-z0-9_]*$``, else :class:`InvalidRequest` (``field="env.NAME"``)."""
    if not ENV_NAME.fullmatch(name):
        raise InvalidRequest(
            target=target,
            field=f"env.{shown_name(name)}",
            reason="invalid environment variable name (must match [A-Za-z_][A-Za-z0-9_]*)",
        )


def check_env(env: Mapping[str, str] | None, *, target: str | None = None) -> dict[str, str]:
    """The environment as a dict, every name a variable name and every value a word that can travel."""
    checked = dict(env or {})
    for name, value in checked.items():
        check_env_name(name, target=target)
        check_text(f"env.{name}", value, target=target)
    return checked


def command_words(
    argv: Sequence[str] | None, shell: str | None, *, target: str | None = None
) -> tuple[str, ...]:
    """The words to run: ``argv``, or ``sh -c shell``; exactly one of the two must be given."""
    if (argv is None) == (shell is None):
        raise InvalidRequest(target=target, field="argv", reason="give exactly one of argv or shell")
    return ("sh", "-c", shell) if shell is not None else tuple(argv or ())


def check_time_limit(
    value: float,
    ceiling: float,
    *,
    field: str = "timeout_s",
    zero_ok: bool = False,
    target: str | None = None,
) -> float:
    """``value`` within ``(0, ceiling]`` (``[0, ceiling]`` with ``zero_ok``), else :class:`InvalidRequest`
    naming ``field`` and the configured ceiling."""
    low_ok = value >= 0 if zero_ok else value > 0
    if not (low_ok and value <= ceiling):  # NaN fails both comparisons
        shown = f"{ceiling:g}"
        interval = f"[0, {shown}]" if zero_ok else f"(0, {shown}]"
        raise InvalidRequest(
            target=target,
            field=field,
            reason=f"must be in {interval} seconds (the configured ceiling is {shown} s)",
        )
    return value


def check_pattern_line(
    pattern: str, *, max_chars: int = 1000, field: str = "pattern", target: str | None = None
) -> None:
    """A pattern matched per line (``grep -E``): one non-empty line, no NUL, at most ``max_chars``."""
    if not pattern or "\n" in pattern or "\0" in pattern or len(pattern) > max_chars:
        raise InvalidRequest(
            target=target,
            field=field,
            reason=f"must be one non-empty line without NUL (at most {max_chars} characters)",
        )


class CommandBody(RequestModel):
    """A command without its target: ``argv`` xor ``shell``, ``cwd``, ``env`` (names checked); the fleet
    tools run one on many targets."""

    argv: list[str] | None = Field(
        None, min_length=1, description="Program and arguments, executed literally (no shell). Preferred."
    )
    shell: str | None = Field(None, min_length=1, description="A POSIX sh command string, run as sh -c.")
    cwd: str | None = Field(None, min_length=1, description="Working directory on the target.")
    env: dict[str, str] = Field(
        default_factory=dict, description="Extra environment variables (names validated)."
    )

    @field_validator("env")
    @classmethod
    def _env_names(cls, value: dict[str, str]) -> dict[str, str]:
        for name in value:
            check_env_name(name)
        return value

    @model_validator(mode="after")
    def _one_command(self) -> Self:
        command_words(self.argv, self.shell)
        return self


class _TargetRequest(RequestModel):
    target: TargetName


class CommandRequest(CommandBody, _TargetRequest):
    """A command for a target: ``target`` first, then what :class:`CommandBody` holds."""
