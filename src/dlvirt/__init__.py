"""dlvirt: how the execution platform changes end-to-end deep-learning inference time."""

__version__ = "0.1.0"
