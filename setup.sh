#!/usr/bin/env bash
# One setup script for a fresh Debian 12 machine (root or sudo), idempotent:
#   ./setup.sh install    install system packages and the Python stack (.venv)
#   ./setup.sh study ...  install, then run the study: snakemake --cores 1 all [extra args]
#   ./setup.sh test ...   install, then run the test suite [extra pytest args]
set -euo pipefail
cd "$(dirname "$(readlink -f "$0")")"

# Debian packages the workflow and its tests use; engines are started by the project itself.
APT_PACKAGES=(
  python3 python3-venv python3-dev build-essential pkg-config
  e2fsprogs util-linux procps
  slurm-wlm munge            # the SLURM profile's test runs a one-node cluster (tests/test_slurm.py)
  openssh-server openssh-client  # edge hosts are reached over SSH; tests/test_edge.py runs an sshd
  docker.io debootstrap      # CN: dlvirt starts its own dockerd when none runs, builds its image offline
  chromium                   # tests/test_report.py opens results/report.html in a headless browser
  qemu-system-x86 qemu-utils libvirt-daemon libvirt-daemon-driver-qemu libvirt-dev  # VM, MVM, VMCN
)

SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"

install_system() {
  local missing=()
  for pkg in "${APT_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
  done
  if [ "${#missing[@]}" -gt 0 ]; then
    echo "setup: installing Debian packages: ${missing[*]}"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}"
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
  local py=${PYTHON:-python3}
  [ -x .venv/bin/python ] || "$py" -m venv .venv
  local stamp=.venv/.dlvirt-requirements.sha256
  local want
  want=$(cat envs/requirements.txt pyproject.toml | sha256sum | cut -d' ' -f1)
  if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
    local extra=()
    # torch 2.13.0+cpu: a local wheel where the machine has one, else PyTorch's CPU index.
    if ! ls /opt/wheels/torch-2.13.0+cpu-*.whl >/dev/null 2>&1; then
      extra=(--extra-index-url https://download.pytorch.org/whl/cpu)
    fi
    .venv/bin/pip install -q --upgrade pip
    .venv/bin/pip install -q "${extra[@]}" -r envs/requirements.txt
    .venv/bin/pip install -q --no-deps --no-build-isolation -e .
    .venv/bin/python -m ipykernel install --sys-prefix >/dev/null
    echo "$want" > "$stamp"
  fi
}

cmd=${1:-install}
[ $# -gt 0 ] && shift
install_system
install_libvirt_user
install_python
export PATH="$PWD/.venv/bin:$PATH"
case "$cmd" in
  install) echo "setup: done (activate with: . .venv/bin/activate)" ;;
  study) exec snakemake --cores 1 all "$@" ;;
  test) exec python -m pytest "$@" ;;
  *) echo "usage: $0 [install|study|test] [args...]" >&2; exit 2 ;;
esac
