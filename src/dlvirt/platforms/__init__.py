"""Platform registry: one module per platform, looked up by the paper's short name."""

from __future__ import annotations

import importlib

from dlvirt.platforms.base import Platform

# name -> "module:Class"; modules are imported on first use so building the DAG stays fast.
_REGISTRY = {
    "BM": "dlvirt.platforms.bm:BareMetal",
    "CN": "dlvirt.platforms.cn:Container",
    "VM": "dlvirt.platforms.vm:VirtualMachine",
    "MVM": "dlvirt.platforms.mvm:MicroVM",
    "VMCN": "dlvirt.platforms.vmcn:ContainerInVM",
}


def platform_class(name: str) -> type[Platform]:
    from dlvirt.matrix import ConfigError

    if name not in _REGISTRY:
        raise ConfigError(f"platform {name!r} is not implemented (known: {', '.join(sorted(_REGISTRY))})")
    module, cls = _REGISTRY[name].split(":")
    return getattr(importlib.import_module(module), cls)  # type: ignore[no-any-return]


def implemented() -> list[str]:
    return sorted(_REGISTRY)
