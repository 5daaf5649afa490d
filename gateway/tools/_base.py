"""Shared pieces of tool adapters: the strict input base model and the output base model.

The argument rules shared with remoteops (a command's argv xor shell and env names, a target name, file
modes, ...) are remoteops' request models and constrained types (``remoteops.requests``), used here as
they are."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from remoteops import RequestModel, TargetName

__all__ = ["Input", "Output", "TargetName"]


class Input(RequestModel):
    """Base of every own tool's arguments: unknown arguments are refused."""


class Output(BaseModel):
    model_config = ConfigDict(frozen=True)
