# The CN benchmark image, built offline by `python -m dlvirt image` (src/dlvirt/platforms/container_image.py),
# which passes BASE (a debootstrapped Debian imported into the engine: no registry needed) and the
# build context: wheelhouse/ + requirements.txt (the host's resolved lock: CPU or GPU stack) and package/ (dlvirt's
# wheel). The wheels reach the build through BuildKit bind mounts, so no layer keeps them.
ARG BASE
FROM ${BASE}
ENV PATH=/opt/dlvirt/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1
RUN python3 -m venv /opt/dlvirt
RUN --mount=type=bind,source=wheelhouse,target=/wheelhouse \
    --mount=type=bind,source=requirements.txt,target=/requirements.txt \
    pip install --no-index --no-cache-dir --find-links /wheelhouse -r /requirements.txt
RUN --mount=type=bind,source=package,target=/package \
    pip install --no-index --no-cache-dir --no-deps /package/dlvirt-*.whl
# Which of the host's two locks this image installed (dlvirt.system.hostinfo.python_stack reads it).
ARG DLVIRT_STACK
ARG DLVIRT_LOCK
RUN printf '{"stack": "%s", "lock": "%s", "reason": "the host stack, whose lock the image was built from", "chosen_by": "dlvirt image"}\n' \
    "$DLVIRT_STACK" "$DLVIRT_LOCK" > /opt/dlvirt/dlvirt-stack.json
# Last, so a new tag invalidates only this layer. The harness reports it from inside.
ARG DLVIRT_IMAGE
LABEL dlvirt.image=$DLVIRT_IMAGE
RUN echo "$DLVIRT_IMAGE" > /etc/dlvirt-image
WORKDIR /tmp
