"""App registry: one module per DL application, looked up by its short name (ic, sr, nlp, rs)."""

from __future__ import annotations

import importlib

from dlvirt.apps.base import App

_REGISTRY = {
    "ic": "dlvirt.apps.ic:ImageClassification",
    "nlp": "dlvirt.apps.nlp:QuestionAnswering",
    "rs": "dlvirt.apps.rs:Recommendation",
    "sr": "dlvirt.apps.sr:SpeechRecognition",
}


def app_class(name: str) -> type[App]:
    from dlvirt.matrix import ConfigError

    if name not in _REGISTRY:
        raise ConfigError(f"app {name!r} is not implemented (known: {', '.join(sorted(_REGISTRY))})")
    module, cls = _REGISTRY[name].split(":")
    return getattr(importlib.import_module(module), cls)  # type: ignore[no-any-return]


def implemented() -> list[str]:
    return sorted(_REGISTRY)
