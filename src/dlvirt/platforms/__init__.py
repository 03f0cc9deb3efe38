"""Platform registry: one module per platform, each declaring its ``PlatformKind`` on its class.

Adding a platform = its module, its entry in ``CLASSES``, its tests and its section of the config
schema; everything else (scenario checks, wildcards, image inputs, figure order and colour, cleanup)
derives from the declarations. Importing the modules imports no engine SDK (libvirt, docker): they
import those where a platform runs.
"""

from __future__ import annotations

from dlvirt.core.kinds import CONTAINER_IMAGE, PlatformKind, look_up, registry
from dlvirt.platforms.base import Platform
from dlvirt.platforms.bm import BareMetal
from dlvirt.platforms.cn import Container
from dlvirt.platforms.mvm import MicroVM
from dlvirt.platforms.scn import SandboxedContainer
from dlvirt.platforms.vm import VirtualMachine
from dlvirt.platforms.vmcn import ContainerInVM

_IMPLEMENTED: list[type[Platform]] = [BareMetal, Container, VirtualMachine, ContainerInVM, MicroVM,
                                      SandboxedContainer]
CLASSES: dict[str, type[Platform]] = registry(_IMPLEMENTED)
KINDS: dict[str, PlatformKind] = {name: cls.kind for name, cls in CLASSES.items()}


def platform_class(name: str) -> type[Platform]:
    return look_up(CLASSES, name, "platform")


def container_platforms() -> list[str]:
    """Every platform that runs the container image (CN, SCN): one engine, one image, one cleanup."""
    return [kind.name for kind in KINDS.values() if kind.image == CONTAINER_IMAGE]


def container_platform() -> str:
    """The platform whose config section selects the Docker engine and the container image (CN, the
    first of the container platforms): every container platform runs that image on that engine."""
    return container_platforms()[0]
