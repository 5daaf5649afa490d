"""The path arguments the remote file tools share: ``path`` (text) or ``path_b64`` (the exact bytes)."""

from __future__ import annotations

import base64
import binascii
from typing import Self

from pydantic import Field, model_validator

from gateway._errors import ErrorCode, ToolFailure
from gateway.tools._base import Input, TargetName

__all__ = ["NEEDS_AGENT", "PathIn", "TargetName", "b64_argument"]

NEEDS_AGENT = " Needs the agent (python3 >= 3.8 on the target)."  # ends every file tool's description
_PATH = (
    "The path on the target (text); a relative path is taken from the remote user's home directory "
    "(where the SSH login starts). Give this or path_b64."
)
_PATH_B64 = "The path's exact bytes, base64 (for names that are not valid UTF-8). Give this or path."


def b64_argument(value: str, field: str) -> bytes:
    """The bytes of a base64 argument; invalid base64 is a ``validation_error`` naming ``field``."""
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise ToolFailure(
            ErrorCode.VALIDATION_ERROR, f"{field} is not valid base64", details={"field": field}
        ) from None


class PathIn(Input):
    target: TargetName
    path: str | None = Field(None, min_length=1, description=_PATH)
    path_b64: str | None = Field(None, min_length=1, description=_PATH_B64)

    @model_validator(mode="after")
    def _one_path(self) -> Self:
        if (self.path is None) == (self.path_b64 is None):
            raise ValueError("give exactly one of path or path_b64")
        return self

    def raw_path(self) -> str | bytes:
        return self.path if self.path is not None else b64_argument(self.path_b64 or "", "path_b64")
