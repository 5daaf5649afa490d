"""Shared pieces of tool adapters: the strict input base model."""

from __future__ import annotations

import re
from typing import Annotated, Self

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

__all__ = ["CommandIn", "Input", "Output", "TargetName"]

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
TargetName = Annotated[str, Field(min_length=1, max_length=128, description="A configured target name.")]


class Input(BaseModel):
    """Base of every own tool's arguments: unknown arguments are refused."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class Output(BaseModel):
    model_config = ConfigDict(frozen=True)


class CommandIn(Input):
    """A command for a target, as ``remote_exec`` and ``task_start`` take it: argv xor shell, cwd, env."""

    target: TargetName
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
        bad = sorted(name for name in value if not _ENV_NAME.match(name))
        if bad:
            raise ValueError(f"invalid environment variable name(s): {', '.join(bad)}")
        return value

    @model_validator(mode="after")
    def _one_command(self) -> Self:
        if (self.argv is None) == (self.shell is None):
            raise ValueError("give exactly one of argv or shell")
        return self
