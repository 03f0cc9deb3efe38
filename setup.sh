#!/usr/bin/env bash
# One setup script for a fresh Debian 12 machine (root or sudo), idempotent:
#   ./setup.sh install    install system packages and the Python stack (.venv)
#   ./setup.sh study ...  install, then run the study: snakemake --cores 1 all [extra args]
#   ./setup.sh test ...   install, then run the test suite [extra pytest args]
#   ./setup.sh peers      install, then add MLPerf's reference SUTs' dependencies (benchmarks/peers.py)
#                         from their own lock (envs/requirements-peers.txt)
# The Python stack is the GPU lock (envs/requirements-gpu.txt) where `nvidia-smi -L` lists a GPU,
# else the CPU lock (envs/requirements.txt); DLVIRT_STACK=cpu|gpu overrides the choice.
# DLVIRT_SETUP_DRY_RUN=1 changes nothing: it says which packages it would install and resolves the
# chosen lock with pip --dry-run in a throwaway venv (metadata only, no wheels kept).
set -euo pipefail
cd "$(dirname "$(readlink -f "$0")")"

# Debian packages, installed without their Recommends: only what each command uses.
# The study's (install, study):
APT_STUDY=(
  python3 python3-venv python3-dev build-essential pkg-config ca-certificates  # .venv; libvirt-python builds
  cmake                                # llama-cpp-python builds its vendored llama.cpp (LLM)
  e2fsprogs util-linux procps          # mkfs.ext4/debugfs (guest disks), taskset, ps
  docker.io debootstrap debian-archive-keyring  # CN: dlvirt starts its own dockerd, builds its image offline
  runsc                                # SCN: gVisor; dlvirt's dockerd registers it (its own config file only)
  qemu-system-x86 qemu-utils libvirt-daemon libvirt-daemon-driver-qemu libvirt-dev  # VM, MVM, VMCN
  openssh-client                       # edge hosts (hosts:) are reached over SSH
)
# ... and what only the tests start:
APT_TEST=(
  slurm-wlm munge                      # tests/integration/test_slurm.py runs a one-node cluster
  openssh-server                       # tests/integration/test_edge.py runs a loopback sshd
  chromium                             # tests/integration/test_report_rendered.py opens the report headless
  crun                                 # tests/integration/test_platform_scn.py runs a CN row on crun
)

SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"

install_system() {
  local missing=()
  for pkg in "$@"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
  done
  [ "${#missing[@]}" -gt 0 ] || return 0
  if [ -n "$DRY_RUN" ]; then
    echo "setup: would install Debian packages: ${missing[*]}"
    return 0
  fi
  echo "setup: installing Debian packages: ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
}

# Which locked stack this machine gets, and why (STACK, LOCK, STACK_REASON).
choose_stack() {
  local gpus=""
  case "${DLVIRT_STACK:-}" in
    cpu|gpu) STACK=$DLVIRT_STACK; STACK_REASON="DLVIRT_STACK=$DLVIRT_STACK" ;;
    "")
      if ! command -v nvidia-smi >/dev/null 2>&1; then
        STACK=cpu; STACK_REASON="no nvidia-smi (no NVIDIA driver installed)"
      elif gpus=$(nvidia-smi -L 2>/dev/null | grep '^GPU ') && [ -n "$gpus" ]; then
        STACK=gpu; STACK_REASON="nvidia-smi -L lists $(wc -l <<<"$gpus") GPU(s): $(head -n1 <<<"$gpus")"
      else
        STACK=cpu; STACK_REASON="nvidia-smi -L lists no GPU"
      fi ;;
    *) echo "setup: DLVIRT_STACK=${DLVIRT_STACK}: expected cpu or gpu" >&2; exit 2 ;;
  esac
  LOCK=envs/requirements.txt
  [ "$STACK" = cpu ] || LOCK=envs/requirements-gpu.txt
  echo "setup: Python stack: $STACK ($LOCK), because $STACK_REASON"
}

# pip's options for the chosen lock. CPU: torch 2.13.0+cpu from a local wheel where the machine has
# one, else PyTorch's CPU index. GPU: PyPI only (a local +cpu wheel would satisfy torch==2.13.0).
pip_options() {
  PIP_OPTS=()
  if [ "$STACK" = gpu ]; then
    export PIP_FIND_LINKS=""
  elif ! ls /opt/wheels/torch-2.13.0+cpu-*.whl >/dev/null 2>&1; then
    PIP_OPTS=(--extra-index-url https://download.pytorch.org/whl/cpu)
  fi
}

# libvirtd's QEMU driver refuses to start without its default user and group (Debian's
# libvirt-daemon-system would create them, but also installs init scripts that start daemons).
install_libvirt_user() {
  getent group libvirt-qemu >/dev/null || $SUDO groupadd --system libvirt-qemu
  getent group kvm >/dev/null || $SUDO groupadd --system kvm
  getent passwd libvirt-qemu >/dev/null || $SUDO useradd --system --no-create-home --home-dir /var/lib/libvirt \
    --shell /usr/sbin/nologin --gid libvirt-qemu --groups kvm libvirt-qemu
}

install_python() {
  local py=${PYTHON:-python3} venv=${DLVIRT_VENV:-.venv}
  pip_options
  if [ -n "$DRY_RUN" ]; then
    local tmp
    tmp=$(mktemp -d)
    "$py" -m venv "$tmp/venv"
    "$tmp/venv/bin/pip" install -q --require-hashes -r envs/pip.txt
    "$tmp/venv/bin/pip" install -q --dry-run --ignore-installed --require-hashes --report "$tmp/report.json" \
      "${PIP_OPTS[@]}" -r "$LOCK"
    echo "setup: $LOCK resolves: $("$tmp/venv/bin/python" -c 'import json,sys; print(len(json.load(open(sys.argv[1]))["install"]))' "$tmp/report.json") packages (dry run: nothing installed)"
    rm -rf "$tmp"
    return 0
  fi
  local record="$venv/dlvirt-stack.json"
  # the other stack's TensorFlow and torch builds cannot share a venv: start a fresh one
  if [ -f "$record" ] && ! grep -q "\"stack\": \"$STACK\"" "$record"; then
    echo "setup: $venv holds the other stack: recreating it"
    rm -rf "$venv"
  fi
  [ -x "$venv/bin/python" ] || "$py" -m venv "$venv"
  local stamp="$venv/.dlvirt-requirements.sha256"
  local want
  want=$(cat "$LOCK" envs/pip.txt pyproject.toml "envs/llama-cpp-cmake-$STACK.txt" | sha256sum | cut -d' ' -f1)
  if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
    "$venv/bin/pip" install -q --require-hashes -r envs/pip.txt
    # llama-cpp-python builds its vendored llama.cpp from the locked sdist with these CMake options
    # (envs/llama-cpp-cmake-*.txt: one portable x86-64 AVX2 build for every platform, emulated guests
    # included; the GPU stack's adds CUDA); the rest of the lock installs as published wheels
    export CMAKE_ARGS CMAKE_BUILD_PARALLEL_LEVEL
    CMAKE_ARGS=$(cat "envs/llama-cpp-cmake-$STACK.txt")
    CMAKE_BUILD_PARALLEL_LEVEL=$(nproc)
    # every archive checked against the lock's sha256s (envs/lock.py writes them)
    "$venv/bin/pip" install -q --require-hashes "${PIP_OPTS[@]}" -r "$LOCK"
    "$venv/bin/pip" install -q --no-deps --no-build-isolation -e .
    "$venv/bin/python" -m ipykernel install --sys-prefix >/dev/null
    echo "$want" > "$stamp"
  fi
  # RS's compiled parser (src/dlvirt/apps/_criteo.c), built in place: again whenever its source is
  # newer than the build (a pull or an edit), so that no launch runs an older parser than its code
  local built
  built=$(ls src/dlvirt/apps/_criteo.*.so 2>/dev/null | head -1)
  if [ -z "$built" ] || [ src/dlvirt/apps/_criteo.c -nt "$built" ]; then
    "$venv/bin/pip" install -q --no-deps --no-build-isolation -e .
  fi
  # what dlvirt.system.hostinfo.python_stack reports in results/host.json and every result
  "$venv/bin/python" -c 'import json, sys; json.dump(dict(zip(("stack", "lock", "reason"), sys.argv[1:]), chosen_by="setup.sh"), open(sys.argv[4], "w"), indent=1)' \
    "$STACK" "$LOCK" "$STACK_REASON" "$record"
}

cmd=${1:-install}
[ $# -gt 0 ] && shift
DRY_RUN=${DLVIRT_SETUP_DRY_RUN:-}
case "$cmd" in
  install|study|peers) packages=("${APT_STUDY[@]}") ;;
  test) packages=("${APT_STUDY[@]}" "${APT_TEST[@]}") ;;
  *) echo "usage: $0 [install|study|test|peers] [args...]" >&2; exit 2 ;;
esac
install_system "${packages[@]}"
choose_stack
if [ -n "$DRY_RUN" ]; then
  install_python
  exit 0
fi
install_libvirt_user
install_python
export PATH="$PWD/${DLVIRT_VENV:-.venv}/bin:$PATH"
case "$cmd" in
  install) echo "setup: done (activate with: . ${DLVIRT_VENV:-.venv}/bin/activate)" ;;
  study) exec snakemake --cores 1 all "$@" ;;
  test) exec python -m pytest "$@" ;;
  peers)
    # every package the study's stack has stays at its version (envs/lock.py peers)
    "${DLVIRT_VENV:-.venv}/bin/pip" install -q --require-hashes -r envs/requirements-peers.txt
    echo "setup: done, with MLPerf's reference SUTs' dependencies (python benchmarks/peers.py --inference DIR)" ;;
esac
