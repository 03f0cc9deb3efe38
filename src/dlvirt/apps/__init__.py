"""App registry: one module per DL application, each declaring its ``AppKind`` on its class.

Adding an app = its module, its entry in ``CLASSES``, its tests and its section of the config schema;
wildcards, the plan, tables and figures derive from the declarations. Importing the modules imports
no DL framework (TensorFlow, PyTorch): they import it where a model is built.
"""

from __future__ import annotations

from dlvirt.apps.base import App
from dlvirt.apps.ic import ImageClassification
from dlvirt.apps.llm import TextGeneration
from dlvirt.apps.nlp import QuestionAnswering
from dlvirt.apps.noop import NoopApp
from dlvirt.apps.rs import Recommendation
from dlvirt.apps.sr import SpeechRecognition
from dlvirt.core.kinds import AppKind, look_up, registry

_IMPLEMENTED: list[type[App]] = [ImageClassification, SpeechRecognition, QuestionAnswering, Recommendation,
                                 TextGeneration, NoopApp]
CLASSES: dict[str, type[App]] = registry(_IMPLEMENTED)
KINDS: dict[str, AppKind] = {name: cls.kind for name, cls in CLASSES.items()}


def app_class(name: str) -> type[App]:
    return look_up(CLASSES, name, "app")


def job_packages() -> list[str]:
    """Every Python distribution an app's jobs import beyond the harness's (AppKind.framework_packages,
    then packages), in app order."""
    return list(dict.fromkeys(name for cls in CLASSES.values()
                              for name in (*cls.kind.framework_packages, *cls.kind.packages)))


def job_system_packages() -> list[str]:
    """Every Debian package an app's jobs need beyond a minimal Debian with Python
    (AppKind.system_packages), in app order: what the CN and guest images install."""
    return list(dict.fromkeys(name for cls in CLASSES.values() for name in cls.kind.system_packages))


def weights_file_names() -> list[str]:
    """Every file name an app's weights resource may have, from the apps' declarations."""
    return sorted({name for cls in CLASSES.values() for name in cls.weights_file_names})
