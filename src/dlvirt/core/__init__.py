"""The lowest layer: vocabulary (scenarios, errors), atomic files and the lazy class loader; imports nothing of dlvirt above it."""
