"""Errors every layer may raise; kept at the bottom so that raising one imports nothing above."""

from __future__ import annotations


class ConfigError(ValueError):
    """The config asks for something that cannot make sense; the message names the key."""


class UnsafePlace(RuntimeError):
    """A place dlvirt writes to as root is not private to it (another owner, a symbolic link, writable
    by others); the message names the path and what is wrong."""
