"""The error every bad setting raises. Imports nothing, so any module may raise it."""

from __future__ import annotations


class ConfigError(ValueError):
    """A setting that cannot run. The message is one line naming the field and what is allowed."""


__all__ = ["ConfigError"]
