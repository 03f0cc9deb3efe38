"""App registry: one module per DL application, looked up by its short name (ic, sr, nlp, rs)."""

from __future__ import annotations

from dlvirt.apps.base import App
from dlvirt.core.registry import load_class

_REGISTRY = {
    "ic": "dlvirt.apps.ic:ImageClassification",
    "nlp": "dlvirt.apps.nlp:QuestionAnswering",
    "rs": "dlvirt.apps.rs:Recommendation",
    "sr": "dlvirt.apps.sr:SpeechRecognition",
}


def app_class(name: str) -> type[App]:
    return load_class(_REGISTRY, "app", name)  # type: ignore[no-any-return]


def implemented() -> list[str]:
    return sorted(_REGISTRY)
