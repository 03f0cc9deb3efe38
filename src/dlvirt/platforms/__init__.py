"""Platform registry: one module per platform, looked up by the paper's short name."""

from __future__ import annotations

from dlvirt.core.registry import load_class
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
    return load_class(_REGISTRY, "platform", name)  # type: ignore[no-any-return]
