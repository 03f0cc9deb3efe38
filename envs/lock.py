"""Resolve a stack's top-level requirements into its lock: ``python envs/lock.py cpu|gpu``.

cpu: envs/requirements.in -> envs/requirements.txt (torch's +cpu build from PyTorch's CPU index or
a local wheel). gpu: envs/requirements-gpu.in -> envs/requirements-gpu.txt, constrained to the CPU
lock's versions of every package the stacks share, so the two stacks differ only in their CUDA
builds. pip resolves with ``install --dry-run --ignore-installed --report``: it reads package
metadata only and installs or downloads no wheel (the GPU stack's CUDA wheels are GBs).
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

ENVS = Path(__file__).resolve().parent
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"
LOCAL_WHEELS = Path("/opt/wheels")  # where a machine keeps torch's +cpu wheel (as setup.sh looks)
STACKS = {
    "cpu": ("requirements.in", "requirements.txt"),
    "gpu": ("requirements-gpu.in", "requirements-gpu.txt"),
}
INSTALLER = ("pip", "setuptools", "wheel")
# In the CPU lock but not shared: the GPU stack brings its own builds of these.
CPU_ONLY = ("tensorflow-cpu", "tensorflow_cpu", "torch")


def shared_constraints(cpu_lock: Path, out: Path) -> Path:
    lines = [line for line in cpu_lock.read_text().splitlines()
             if line and not line.startswith("#") and line.split("==")[0].lower() not in CPU_ONLY]
    out.write_text("\n".join(lines) + "\n")
    return out


def resolve(stack: str) -> list[str]:
    source, _ = STACKS[stack]
    env = dict(os.environ)
    # the machine's own pip config (a local wheel folder, version caps) must not shape a lock
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_FIND_LINKS="", PIP_CONSTRAINT="")
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        cmd = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet",
               "--report", str(report), "-r", str(ENVS / source)]
        if stack == "cpu":
            local = sorted(LOCAL_WHEELS.glob("torch-2.13.0+cpu-*.whl"))
            cmd += ["--find-links", str(LOCAL_WHEELS)] if local else ["--extra-index-url", TORCH_CPU_INDEX]
        else:
            cmd += ["-c", str(shared_constraints(ENVS / STACKS["cpu"][1], Path(tmp) / "shared.txt"))]
        subprocess.run(cmd, check=True, env=env, cwd=ENVS)
        installs = json.loads(report.read_text())["install"]
    pins = {item["metadata"]["name"]: item["metadata"]["version"] for item in installs}
    # as pip freeze writes a lock: by name, without the installer's own packages
    return [f"{name}=={pins[name]}" for name in sorted(pins, key=str.lower) if name.lower() not in INSTALLER]


def main(argv: list[str]) -> int:
    if len(argv) != 1 or argv[0] not in STACKS:
        print(f"usage: python envs/lock.py {'|'.join(STACKS)}", file=sys.stderr)
        return 2
    stack = argv[0]
    source, lock = STACKS[stack]
    pins = resolve(stack)
    today = datetime.date.today().isoformat()
    header = [(f"# Resolved from envs/{source} on {today} (Python {platform.python_version()}, "
              f"{platform.machine()}) by envs/lock.py {stack}: the exact stack every platform installs.")]
    if stack == "cpu":
        header.append(f"# torch 2.13.0+cpu comes from the PyTorch CPU wheel index (--extra-index-url "
                      f"{TORCH_CPU_INDEX}) or a local wheel.")
    else:
        header.append("# Shared packages are pinned to envs/requirements.txt's versions; torch, TensorFlow and the "
                      "nvidia-* wheels are CUDA builds from PyPI.")
    (ENVS / lock).write_text("\n".join(header + pins) + "\n")
    print(f"envs/{lock}: {len(pins)} packages")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
