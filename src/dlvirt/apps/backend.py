"""The model-backend interface of an app with several frameworks (IC: Keras ResNet50 on TensorFlow,
ResNet50 v1.5 on PyTorch; ``apps.<app>.framework`` picks one).

The app keeps the dataset, pre- and post-processing and its answers; a backend builds the model in its
framework, loads or saves its weights, runs a pre-processed batch and reports what the framework
does. Adding a framework to such an app is one backend class in its ``BACKENDS`` (and its conda env).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

import numpy as np

from dlvirt.apps.base import ThreadPlan


class ModelBackend(Protocol):
    framework: str               # the framework, as apps.<app>.framework names it
    architecture: str            # the model's variant, for the run record's provenance
    weights_file: str            # the weights resource's file name, in the framework's own format

    @classmethod
    def import_framework(cls) -> None:
        """Import the framework (the launch's start-up, kept apart from the model load)."""

    def __init__(self, threads: ThreadPlan, processor: str, seed: int, weights: Path | None,
                 cached: Path | None = None) -> None:
        """Build the model on ``processor`` with the thread plan set; load ``weights`` (configured) or
        ``cached`` (the seeded initialisation saved once), else initialise from ``seed``."""

    def first_call(self) -> None: ...
    def optimisation(self) -> dict[str, Any]: ...  # how the model runs, for the run record's model
    def save(self, path: Path) -> None: ...
    def __call__(self, batch: np.ndarray) -> np.ndarray: ...
    def gpu_state(self) -> dict[str, Any]: ...
    def threads(self) -> dict[str, Any]: ...
    def versions(self) -> dict[str, str]: ...
