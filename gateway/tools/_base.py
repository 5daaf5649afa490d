"""Shared pieces of tool adapters: the strict input base model and the output base model.

The argument rules shared with remoteops (a command's argv xor shell and env names, a target name, file
modes, ...) are remoteops' request models and constrained types (``remoteops.requests``), used here as
they are."""

from __future__ import annotations

import base64
import binascii
import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict

from gateway._errors import ErrorCode, ToolFailure
from remoteops import PrivilegeError, PrivilegeReport, RequestModel, TargetName

if TYPE_CHECKING:
    from gateway._context import ToolContext

__all__ = [
    "Input",
    "Output",
    "TargetName",
    "audit_privilege",
    "decode_stdin",
    "privilege_failure_audited",
]


class Input(RequestModel):
    """Base of every own tool's arguments: unknown arguments are refused."""


class Output(BaseModel):
    model_config = ConfigDict(frozen=True)


def decode_stdin(stdin: str | None, encoding: str) -> bytes | None:
    """A command's ``stdin`` argument as bytes (``text``: UTF-8; ``base64``: decoded, strictly)."""
    if stdin is None:
        return None
    if encoding == "text":
        return stdin.encode("utf-8")
    try:
        return base64.b64decode(stdin, validate=True)
    except (binascii.Error, ValueError):
        raise ToolFailure(ErrorCode.VALIDATION_ERROR, "stdin is not valid base64") from None


@contextlib.contextmanager
def privilege_failure_audited(ctx: ToolContext) -> Iterator[None]:
    """A :class:`PrivilegeError` raised inside goes on, with every provider attempt in the audit record's
    ``facts.privilege`` (nothing ran as root: ``ran_as`` is None)."""
    try:
        yield
    except PrivilegeError as exc:
        ctx.audit_facts["privilege"] = {
            "ran_as": None,
            "reason": exc.reason,
            "attempts": [attempt.model_dump(mode="json") for attempt in exc.attempts],
        }
        raise


def audit_privilege(ctx: ToolContext, report: PrivilegeReport | None) -> None:
    """The privilege report of a call that ran, in the audit record's ``facts.privilege``."""
    if report is not None:
        ctx.audit_facts["privilege"] = report.model_dump(mode="json")
