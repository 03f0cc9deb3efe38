"""Resolve a stack's top-level requirements into its lock: ``python envs/lock.py cpu|gpu|peers [--keep]``.

cpu: envs/requirements.in -> envs/requirements.txt (torch's +cpu build from PyTorch's CPU index or
a local wheel). gpu: envs/requirements-gpu.in -> envs/requirements-gpu.txt, constrained to the CPU
lock's versions of every package the stacks share, so the two stacks differ only in their CUDA
builds. peers: envs/requirements-peers.in -> envs/requirements-peers.txt (MLPerf's reference SUTs'
dependencies for benchmarks/peers.py, installed beside the CPU stack), constrained the same way.
pip resolves with ``install --dry-run --ignore-installed --report``: it reads package metadata only
and installs or downloads no wheel (the GPU stack's CUDA wheels are GBs).
``--keep``: the lock's present versions stay (they constrain the resolution; a package the ``.in``
files gained is added): to refresh the hashes without moving the stack.

Every pin carries the sha256 of each archive pip installs it from (``--hash``; setup.sh installs with
``--require-hashes``): the archive pip chooses from the public indexes (PyPI, PyTorch's CPU index or
the local torch wheel) and the one it chooses with this machine's own pip configuration (a local
mirror of PyPI, a local wheel folder), which are the same file where the mirror is a faithful copy.
The hashes are pip's own (its ``--report``: the index's digest, or the local file's): the same
resolution again, package by package with ``--no-deps``, so both choices are seen.
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
    "peers": ("requirements-peers.in", "requirements-peers.txt"),
}
INSTALLER = ("pip",)  # setuptools and wheel stay: packages need them (--require-hashes pins every one)
# In the CPU lock but not shared: the GPU stack brings its own builds of these.
CPU_ONLY = ("tensorflow-cpu", "tensorflow_cpu", "torch")


def read_pins(lock: Path) -> list[str]:
    """The ``name==version`` lines of a lock, without its comments and ``--hash`` options."""
    text = lock.read_text().replace("\\\n", " ") if lock.exists() else ""
    return [line.split()[0] for line in text.splitlines() if line.strip() and not line.startswith("#")]


def shared_constraints(cpu_lock: Path, out: Path) -> Path:
    lines = [pin for pin in read_pins(cpu_lock) if pin.split("==")[0].lower() not in CPU_ONLY]
    out.write_text("\n".join(lines) + "\n")
    return out


def _pip_report(stack: str, args: list[str], public: bool) -> list[dict]:
    """What ``pip install --dry-run --report`` would install for ``args``: from the public indexes
    (``public``; this machine's pip configuration set aside, as a lock must not depend on it) or
    as this machine's pip would (its configuration, as setup.sh installs)."""
    env = dict(os.environ)
    extra: list[str] = []
    if public:
        env.update(PIP_CONFIG_FILE=os.devnull, PIP_FIND_LINKS="", PIP_CONSTRAINT="")
    if stack == "cpu":
        local = sorted(LOCAL_WHEELS.glob("torch-2.13.0+cpu-*.whl"))
        extra = ["--find-links", str(LOCAL_WHEELS)] if local else ["--extra-index-url", TORCH_CPU_INDEX]
    else:
        env["PIP_FIND_LINKS"] = ""  # as setup.sh: a local +cpu torch wheel would satisfy torch==2.13.0
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        cmd = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet",
               "--report", str(report), *extra, *args]
        subprocess.run(cmd, check=True, env=env, cwd=ENVS)
        return list(json.loads(report.read_text())["install"])


def resolve(stack: str, keep: bool = False) -> list[str]:
    source, lock = STACKS[stack]
    with tempfile.TemporaryDirectory() as tmp:
        args = ["-r", str(ENVS / source)]
        if stack != "cpu":
            args += ["-c", str(shared_constraints(ENVS / STACKS["cpu"][1], Path(tmp) / "shared.txt"))]
        if keep and read_pins(ENVS / lock):
            kept = Path(tmp) / "kept.txt"
            kept.write_text("\n".join(read_pins(ENVS / lock)) + "\n")
            args += ["-c", str(kept)]
        installs = _pip_report(stack, args, public=True)
    pins = {item["metadata"]["name"]: item["metadata"]["version"] for item in installs}
    # by name, without pip itself
    return [f"{name}=={pins[name]}" for name in sorted(pins, key=str.lower) if name.lower() not in INSTALLER]


def _sha256(item: dict) -> str:
    info = item["download_info"]
    digest = (info.get("archive_info") or {}).get("hashes", {}).get("sha256")
    if digest is None:
        raise SystemExit(f"lock: pip reports no sha256 for {info.get('url')} ({item['metadata']['name']})")
    return str(digest)


def archive_hashes(stack: str, pins: list[str]) -> dict[str, list[str]]:
    """name -> the sha256 of every archive pip installs that pin from (see the module doc)."""
    found: dict[str, set[str]] = {}
    versions = {pin.split("==")[0].lower(): pin.split("==")[1] for pin in pins}
    with tempfile.TemporaryDirectory() as tmp:
        exact = Path(tmp) / "pins.txt"
        exact.write_text("\n".join(pins) + "\n")
        for public in (True, False):
            for item in _pip_report(stack, ["--no-deps", "-r", str(exact)], public):
                name, version = item["metadata"]["name"].lower(), item["metadata"]["version"]
                # another build that satisfies the pin (a local torch 2.13.0+cpu for the GPU
                # stack's torch==2.13.0) is not the locked one
                if version == versions[name]:
                    found.setdefault(name, set()).add(_sha256(item))
    missing = [pin for pin in pins if pin.split("==")[0].lower() not in found]
    if missing:
        raise SystemExit(f"lock: no archive found for {', '.join(missing)}")
    return {name: sorted(digests) for name, digests in found.items()}


def lock_lines(pins: list[str], hashes: dict[str, list[str]]) -> list[str]:
    """Each pin with its ``--hash`` options, one a line, as pip-compile --generate-hashes writes them."""
    lines = []
    for pin in pins:
        digests = hashes[pin.split("==")[0].lower()]
        lines.append(" \\\n".join([pin, *(f"    --hash=sha256:{d}" for d in digests)]))
    return lines


def main(argv: list[str]) -> int:
    keep = "--keep" in argv
    argv = [a for a in argv if a != "--keep"]
    if len(argv) != 1 or argv[0] not in STACKS:
        print(f"usage: python envs/lock.py {'|'.join(STACKS)} [--keep]", file=sys.stderr)
        return 2
    stack = argv[0]
    source, lock = STACKS[stack]
    pins = resolve(stack, keep)
    hashes = archive_hashes(stack, pins)
    today = datetime.date.today().isoformat()
    what = "the exact packages ./setup.sh peers adds" if stack == "peers" else "the exact stack every platform installs"
    header = [(f"# Resolved from envs/{source} on {today} (Python {platform.python_version()}, "
              f"{platform.machine()}) by envs/lock.py {stack}: {what}.")]
    if stack == "cpu":
        header.append(f"# torch 2.13.0+cpu comes from the PyTorch CPU wheel index (--extra-index-url "
                      f"{TORCH_CPU_INDEX}) or a local wheel.")
    elif stack == "gpu":
        header.append("# Shared packages are pinned to envs/requirements.txt's versions; torch, TensorFlow and the "
                      "nvidia-* wheels are CUDA builds from PyPI.")
    else:
        header.append("# Installed beside envs/requirements.txt (./setup.sh peers); shared packages are pinned to "
                      "its versions.")
    header.append("# Every pin carries the sha256 of each archive it may be installed from (pip --require-hashes).")
    (ENVS / lock).write_text("\n".join(header + lock_lines(pins, hashes)) + "\n")
    print(f"envs/{lock}: {len(pins)} packages")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
