"""``study.memory``: the one memory size every platform of a study gets.

It is written with a unit, ``m`` (MiB) or ``g`` (GiB = 1024 MiB), binary as docker's ``--memory``
reads it, and carried to the platforms in MiB (``memory_mib`` in each platform's settings).
"""

from __future__ import annotations

import re

from dlvirt.core.errors import ConfigError

KEY = "study.memory"
_SIZE = re.compile(r"([1-9][0-9]*)([mg])", re.IGNORECASE)


def parse_mib(text: object, key: str = KEY) -> int:
    """``8g`` or ``512m`` in MiB; anything else is a ConfigError naming ``key``."""
    match = _SIZE.fullmatch(str(text).strip())
    if match is None:
        raise ConfigError(f"{key}: {text!r} is not a size like 8g (GiB) or 512m (MiB)")
    return int(match.group(1)) << (10 if match.group(2).lower() == "g" else 0)
