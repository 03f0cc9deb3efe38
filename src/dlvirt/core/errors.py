"""Errors every layer may raise; kept at the bottom so that raising one imports nothing above."""

from __future__ import annotations


class ConfigError(ValueError):
    """The config asks for something that cannot make sense; the message names the key."""
