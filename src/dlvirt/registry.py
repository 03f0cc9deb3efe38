"""Lazy class registries ("name" -> "module:Class"): modules are imported on first use, so building
the DAG never imports a framework or an engine SDK."""

from __future__ import annotations

import importlib
from typing import Any


def load_class(registry: dict[str, str], kind: str, name: str) -> Any:
    from dlvirt.matrix import ConfigError

    if name not in registry:
        raise ConfigError(f"{kind} {name!r} is not implemented (known: {', '.join(sorted(registry))})")
    module, cls = registry[name].split(":")
    return getattr(importlib.import_module(module), cls)
