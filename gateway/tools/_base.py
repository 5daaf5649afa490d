"""Shared pieces of tool adapters: the strict input base model."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

__all__ = ["Input", "Output"]


class Input(BaseModel):
    """Base of every own tool's arguments: unknown arguments are refused."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class Output(BaseModel):
    model_config = ConfigDict(frozen=True)
