"""The lowest layer: vocabulary (scenarios, errors, records), atomic files and the lazy class loader;
imports nothing of dlvirt above it."""
