"""The CN benchmark image, built without any registry and named by what went into it.

- Base: ``debootstrap --variant=minbase bookworm`` + ``docker import`` (Docker Hub is not needed).
- Python layer: the host resolves its own pinned lock (the stack setup.sh chose: the CPU lock
  ``envs/requirements.txt``, or on a GPU host the CUDA one ``envs/requirements-gpu.txt``, whose
  image ``--gpus`` scenarios run; the NVIDIA driver's libraries come from the NVIDIA Container
  Toolkit at run time) into a wheelhouse
  (``pip wheel``: wheels as published, pure-Python sdists built once here) and the Dockerfile
  installs it offline through a BuildKit bind mount, so the wheels are in no layer and the
  container runs exactly the library versions bare metal runs.
- The dlvirt package, built into a wheel on the host, is installed last.
- Tag: ``dlvirt-cn:<hash>`` over the Dockerfile, the lock, the package's code and the base recipe,
  so an unchanged input set is never rebuilt (the engine already has that tag), and a changed one
  gets a new tag (and the CN jobs that ran the old image rerun).
- Claims: a study (one checkout) that uses an image tags it ``dlvirt-cn-study-<hash of the
  checkout's path>:<hash>`` too; a new build prunes only this study's claims beyond
  ``platforms.CN.keep_images`` and removes an image only when no other study claims it, so two
  studies sharing an engine never remove each other's images.

Users with a registry can run a pulled image instead (``platforms.CN.image``).
"""

from __future__ import annotations

import contextlib
import glob
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from dlvirt.apps import job_packages, job_system_packages
from dlvirt.core.atomic import write_json_atomic
from dlvirt.core.codeversion import SOURCE_SUFFIXES
from dlvirt.core.credentials import Login, redact, split_login
from dlvirt.system import benchlock, docker_engine, private
from dlvirt.system.engines import EngineError, locked
from dlvirt.system.hostinfo import python_stack

DOCKERFILE = "envs/cn.Dockerfile"
# The lock of each stack (setup.sh installs one on the host; the images get the host's).
LOCKS = {"cpu": "envs/requirements.txt", "gpu": "envs/requirements-gpu.txt"}
# The label carrying the image's own tag (the harness reads the same tag from inside the image).
TAG_LABEL = "dlvirt.image"
# The config section that selects the Docker engine and names the image (the CN platform's).
SETTINGS = "platforms.CN"
IMAGE_REPO = "dlvirt-cn"
KEEP_IMAGES = 3  # platforms.CN.keep_images: dlvirt-cn images kept when a new one is built
DIGEST = re.compile(r"@sha256:[0-9a-f]{64}$")  # what a pulled image must be named by
BASE_REPO = "dlvirt-base"
# The base recipe. bookworm's Python is 3.11, the version the host's lock is resolved for.
SUITE = "bookworm"
VARIANT = "minbase"
# Python's venv, and the Debian packages the apps' jobs need beyond it (AppKind.system_packages)
BASE_PACKAGES = ("python3-venv", *job_system_packages())
# torch 2.13.0 is a CPU build only as a local wheel or from PyTorch's CPU index (as in setup.sh).
LOCAL_WHEELS = Path("/opt/wheels")
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"


# The CMake options llama-cpp-python's sdist builds llama.cpp with, per stack (setup.sh reads them too)
LLAMA_CPP_CMAKE = "envs/llama-cpp-cmake-{}.txt"


def host_stack() -> str:
    return str(python_stack(job_packages())["stack"])


def host_lock() -> str:
    """The lock of the host's stack, relative to the repository: what the images install."""
    return LOCKS[host_stack()]


def image_inputs(root: Path) -> list[Path]:
    """Every file whose content the image depends on (the Snakemake rule's inputs too)."""
    package = Path(root) / "src" / "dlvirt"
    code = sorted(p for p in package.rglob("*") if p.is_file() and p.suffix in (*SOURCE_SUFFIXES, ".typed")
                  and "__pycache__" not in p.parts)
    return [Path(root) / DOCKERFILE, Path(root) / host_lock(), Path(root) / LLAMA_CPP_CMAKE.format(host_stack()),
            Path(root) / "pyproject.toml", *code]


def _digest(parts: list[tuple[str, bytes]]) -> str:
    digest = hashlib.sha256()
    for name, data in parts:
        digest.update(f"{name}\0{len(data)}\0".encode())
        digest.update(data)
    return digest.hexdigest()


def base_tag() -> str:
    recipe = _digest([("recipe", f"{SUITE} {VARIANT} {' '.join(BASE_PACKAGES)}".encode())])
    return f"{BASE_REPO}:{SUITE}-{VARIANT}-{recipe[:12]}"


def content_tag(root: Path) -> str:
    """``dlvirt-cn:<hash>`` of the image's inputs (paths relative to ``root``)."""
    root = Path(root)
    parts = [("base", base_tag().encode())]
    parts += [(str(p.relative_to(root)), p.read_bytes()) for p in image_inputs(root)]
    return f"{IMAGE_REPO}:{_digest(parts)[:16]}"


def debian_mirror(settings: dict[str, Any]) -> str:
    """``platforms.CN.debian_mirror``, else the host's own Debian mirror, else deb.debian.org."""
    if settings.get("debian_mirror"):
        return str(settings["debian_mirror"])
    sources = [Path("/etc/apt/sources.list"), *sorted(Path("/etc/apt/sources.list.d").glob("*"))]
    for path in sources:
        try:
            text = path.read_text()
        except OSError:
            continue
        for url in re.findall(r"^(?:URIs:|deb)\s+(?:\[[^]]*\]\s+)?(\S+)", text, flags=re.MULTILINE):
            if url.rstrip("/").endswith("/debian"):
                return str(url)
    return "http://deb.debian.org/debian"


@contextlib.contextmanager
def mirror_login(mirror: str) -> Iterator[tuple[str, dict[str, str] | None, Login | None]]:
    """For debootstrap: ``mirror`` without the credentials it may carry (so that they reach no
    command line, no image's sources.list and no log), the environment to run it with (None: ours;
    else HOME a private folder whose ``.netrc``, 0600, hands them to debootstrap's wget) and the
    credentials themselves (for apt in the image being built)."""
    url, login = split_login(mirror)
    if login is None:
        yield url, None, None
        return
    home = Path(tempfile.mkdtemp(prefix="dlvirt-mirror-"))  # 0700, root's
    try:
        private.create_file(home / ".netrc", login.netrc().encode())
        yield url, {**os.environ, "HOME": str(home)}, login
    finally:
        shutil.rmtree(home, ignore_errors=True)


def _run(cmd: list[str], **kwargs: Any) -> None:
    print("+", redact(" ".join(cmd)), flush=True)
    subprocess.run(cmd, check=True, **kwargs)


def build_base(client: Any, settings: dict[str, Any], workdir: Path) -> str:
    """Import the debootstrapped base image unless the engine has it already."""
    from docker.errors import ImageNotFound  # the SDK only where images are built: planning never imports it

    tag = base_tag()
    try:
        client.images.get(tag)
        return tag
    except ImageNotFound:
        pass
    if shutil.which("debootstrap", path="/usr/sbin:/sbin:/usr/bin:/bin") is None:
        raise EngineError("building the CN image needs debootstrap (Debian: apt-get install debootstrap), "
                          "or set platforms.CN.image to an image from a registry")
    rootfs = workdir / "rootfs"
    shutil.rmtree(rootfs, ignore_errors=True)
    try:
        with mirror_login(debian_mirror(settings)) as (mirror, env, _):
            _run(["debootstrap", f"--variant={VARIANT}", f"--include={','.join(BASE_PACKAGES)}", SUITE,
                  str(rootfs), mirror], env=env)
        for leftover in ("var/cache/apt/archives", "var/lib/apt/lists"):
            for path in (rootfs / leftover).glob("*"):
                if path.is_file():
                    path.unlink()
        tar = subprocess.Popen(["tar", "--numeric-owner", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE)
        assert tar.stdout is not None
        repository, name = tag.split(":")
        client.api.import_image_from_stream(
            tar.stdout, repository=repository, tag=name,
            changes=["ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"])
        if tar.wait() != 0:
            raise EngineError(f"tar of {rootfs} failed with status {tar.returncode}")
    finally:
        shutil.rmtree(rootfs, ignore_errors=True)
    client.images.get(tag)
    return tag


def resolve_wheelhouse(root: Path, context: Path) -> None:
    """The lock's wheels under ``context/wheelhouse``, resolved again only when the lock changed."""
    requirements = Path(root) / host_lock()
    wheelhouse = context / "wheelhouse"
    stamp = wheelhouse / ".requirements.sha256"
    want = hashlib.sha256(requirements.read_bytes()).hexdigest()
    if stamp.exists() and stamp.read_text().strip() == want:
        return
    shutil.rmtree(wheelhouse, ignore_errors=True)
    wheelhouse.mkdir(parents=True)
    # llama-cpp-python's sdist builds here as setup.sh builds it (or comes from pip's cache of that build)
    env = dict(os.environ, CMAKE_ARGS=(Path(root) / LLAMA_CPP_CMAKE.format(host_stack())).read_text().strip())
    if host_stack() == "gpu":
        extra: list[str] = []
        env["PIP_FIND_LINKS"] = ""  # PyPI's CUDA torch 2.13.0: a local +cpu wheel would satisfy the pin too
    else:
        local = glob.glob(str(LOCAL_WHEELS / "torch-2.13.0+cpu-*.whl"))
        extra = [] if local else ["--extra-index-url", TORCH_CPU_INDEX]
        if LOCAL_WHEELS.is_dir():
            extra += ["--find-links", str(LOCAL_WHEELS)]
    # the lock's hashes check every archive downloaded here (pip's hash-checking mode)
    _run([sys.executable, "-m", "pip", "wheel", "--quiet", *extra, "-w", str(wheelhouse), "-r", str(requirements)],
         env=env)
    (context / "requirements.txt").write_text(pins_only(requirements))
    stamp.write_text(want + "\n")


def pins_only(lock: Path) -> str:
    """The lock's ``name==version`` lines without their ``--hash`` options: what an install from the
    wheelhouse pins. Its wheels were checked against the hashes as they were downloaded; a wheel
    built here from a checked sdist has a hash of its own, which the lock cannot know."""
    text = lock.read_text().replace("\\\n", " ")
    return "".join(line.split()[0] + "\n" for line in text.splitlines() if line.strip() and not line.startswith("#"))


def build_package(root: Path, context: Path) -> None:
    """dlvirt as a wheel under ``context/package`` (built from a copy: the repository stays clean)."""
    source = context / "package-src"
    package = context / "package"
    for path in (source, package):
        shutil.rmtree(path, ignore_errors=True)
    shutil.copytree(Path(root) / "src", source / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    shutil.copy2(Path(root) / "pyproject.toml", source / "pyproject.toml")
    _run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
          "-w", str(package), str(source)])
    shutil.rmtree(source)


def buildkit_cli() -> tuple[list[str], dict[str, str]]:
    """A docker CLI that builds with BuildKit (``RUN --mount``): buildx, or a 20.10-22.x CLI whose
    built-in BuildKit needs no buildx (Debian's docker.io). Returns (command prefix, extra env)."""
    candidates: list[str] = []
    for path in (shutil.which("docker"), "/usr/bin/docker", "/usr/local/bin/docker"):
        if path and Path(path).exists() and Path(path).resolve() not in [Path(c).resolve() for c in candidates]:
            candidates.append(path)
    for cli in candidates:
        if subprocess.run([cli, "buildx", "version"], capture_output=True, check=False).returncode == 0:
            return [cli, "buildx", "build", "--load"], {}
    for cli in candidates:
        out = subprocess.run([cli, "--version"], capture_output=True, text=True, check=False).stdout
        match = re.search(r"version (\d+)\.", out)
        if match and int(match.group(1)) < 23:
            return [cli, "build"], {"DOCKER_BUILDKIT": "1"}
    raise EngineError(f"no docker CLI with BuildKit among {candidates}: install docker-buildx, or Debian's "
                      "docker.io (its 20.10 CLI has BuildKit built in)")


def build(root: Path, settings: dict[str, Any], client: Any, workdir: Path) -> str:
    root = Path(root)
    tag = content_tag(root)
    workdir.mkdir(parents=True, exist_ok=True)
    base = build_base(client, settings, workdir)
    context = workdir / "context"
    resolve_wheelhouse(root, context)
    build_package(root, context)
    cli, env = buildkit_cli()
    url = docker_engine.engine_url(settings)
    _run([*cli, "--progress=plain", "--network=none", "-f", str(root / DOCKERFILE), "-t", tag,
          "--build-arg", f"BASE={base}", "--build-arg", f"DLVIRT_IMAGE={tag}",
          "--build-arg", f"DLVIRT_STACK={host_stack()}", "--build-arg", f"DLVIRT_LOCK={host_lock()}", str(context)],
         env={**os.environ, **env, "DOCKER_HOST": url})
    return tag


def study_repo(root: Path, repo: str = IMAGE_REPO) -> str:
    """The repository of the study in checkout ``root``'s claims on images of ``repo``: one study, one
    checkout (its resolved path), on every engine it uses."""
    return f"{repo}-study-{hashlib.sha256(str(Path(root).resolve()).encode()).hexdigest()[:12]}"


def claim(image: Any, tag: str, claims: str) -> None:
    """Mark ``image`` (tagged ``tag``, ``<repo>:<name>``) as used by the study whose claims are the
    repository ``claims``: a second tag, ``<claims>:<name>``, which keeps it from other studies' prunes."""
    image.tag(claims, tag.split(":", 1)[1])


def prune(client: Any, keep: int, claims: str, repo: str = IMAGE_REPO) -> list[str]:
    """Drop this study's claims (``<claims>:*``) on all but the newest ``keep`` of the ``<repo>:*``
    images it used, and remove each such image that no other study claims (the engine refuses one a
    container still uses: it is kept, with its tags). Another study's images, claimed or not, are left."""
    from docker.errors import APIError, NotFound

    others = f"{repo}-study-"
    claimed = [(image.attrs.get("Created", ""), image, tag) for image in client.images.list(name=claims)
               for tag in image.tags if tag.startswith(f"{claims}:")]
    said = []
    for _, image, tag in sorted(claimed, key=lambda item: (item[0], item[2]), reverse=True)[keep:]:
        shared = f"{repo}:{tag.split(':', 1)[1]}"
        try:
            client.images.remove(tag)  # while the image has another tag, this only drops the claim
        except APIError as exc:  # the claim was its last tag, and a container uses it
            said.append(f"kept old CN image {tag}: {exc.explanation or exc}")
            continue
        try:
            image.reload()  # as it is now: another study may have claimed it meanwhile
        except NotFound:
            said.append(f"removed old CN image {tag} (platforms.CN.keep_images: {keep})")
            continue
        users = [t for t in image.tags if t.startswith(others)]
        if users or shared not in image.tags:
            said.append(f"released old CN image {shared} (platforms.CN.keep_images: {keep}); "
                        f"kept for {len(users)} other stud{'y' if len(users) == 1 else 'ies'}")
            continue
        try:
            client.images.remove(shared)
            said.append(f"removed old CN image {shared} (platforms.CN.keep_images: {keep})")
        except APIError as exc:
            image.tag(claims, tag.split(":", 1)[1])  # still this study's, to prune again next time
            said.append(f"kept old CN image {shared}: {exc.explanation or exc}")
    return said


def build_dir(settings: dict[str, Any]) -> Path:
    """One build folder per host, beside dlvirt's Docker data-root: the wheelhouse is resolved once
    per lock, and BuildKit, which caches a build context per folder, keeps a single copy of it."""
    return Path(settings.get("engine", {}).get("data_root", docker_engine.DEFAULT_DATA_ROOT)).parent / "cn-build"


def ensure(root: Path, settings: dict[str, Any], marker: Path) -> dict[str, Any]:
    """Make the CN image available in the engine and write ``marker`` describing it.

    ``platforms.CN.image`` set: that image (pulled when absent, by digest only). Else dlvirt's own, built only
    when the engine lacks its content tag."""
    from docker.errors import ImageNotFound

    started = time.monotonic()
    client = docker_engine.connect(settings, SETTINGS)
    try:
        wanted = settings.get("image")
        built = False
        if wanted:
            try:
                image = client.images.get(wanted)
                source = "present"
            except ImageNotFound:
                if not DIGEST.search(wanted):
                    raise EngineError(f"platforms.CN.image: {wanted} is not in the engine and would be pulled by "
                                      "tag, which a registry may change at any time: name it by digest "
                                      "(name@sha256:<64 hex digits>)") from None
                print(f"pulling {wanted}", flush=True)
                image = client.images.pull(wanted)
                source = "pulled"
        else:
            wanted = content_tag(root)
            # one host: builds, claims and prunes wait for each other
            with locked(build_dir(settings), "the CN image's build directory"):
                try:
                    image = client.images.get(wanted)
                    source = "present"
                except ImageNotFound:
                    # it loads the machine for minutes: no launch of any study runs beside it
                    with benchlock.held("building the CN image", root.resolve(), lambda line: print(f"dlvirt: {line}")):
                        build(root, settings, client, build_dir(settings))
                    image = client.images.get(wanted)
                    source = "built"
                    built = True
                claim(image, wanted, study_repo(root))
                if built:
                    for line in prune(client, int(settings.get("keep_images", KEEP_IMAGES)), study_repo(root)):
                        print(line, flush=True)
        info = {"image": wanted, "id": image.id, "size_bytes": image.attrs.get("Size"), "source": source,
                "built": built, "seconds": round(time.monotonic() - started, 1),
                "engine": redact(docker_engine.engine_url(settings)), "own_build": not settings.get("image")}
        print(f"CN image {wanted} ({source}, {image.id[:19]})", flush=True)
        write_json_atomic(Path(marker), info)
        return info
    finally:
        client.close()
