"""Lazy class registries ("name" -> "module:Class"): modules are imported on first use, so building
the DAG never imports a framework or an engine SDK."""

from __future__ import annotations

import importlib
from typing import Any

from dlvirt.core.errors import ConfigError


def load_class(registry: dict[str, str], kind: str, name: str) -> Any:
    if name not in registry:
        raise ConfigError(f"{kind} {name!r} is not implemented (known: {', '.join(sorted(registry))})")
    module, cls = registry[name].split(":")
    return getattr(importlib.import_module(module), cls)
