"""The base of every contract model."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Frozen(BaseModel):
    """Base of every contract model: immutable, unknown fields rejected."""

    model_config = ConfigDict(frozen=True, extra="forbid", str_strip_whitespace=False)
