"""Edge hosts: benchmark jobs on another machine, reached with the OpenSSH client.

The remote machine runs the very runner a local job runs (``python -m dlvirt bench``), so every
platform is provisioned, observed and verified on the machine it measures, with that machine's own
engines (its dockerd, its QEMU/libvirt), kernel and CPU architecture: an ARM edge board builds and
runs ARM images, and BM's cgroups and affinity are the board's. Only files travel over SSH:

- code and inputs are copied once, content-addressed under the host's working directory
  (``code/<sha256>/dlvirt``, ``datasets/<app>-<sha256>``): an unchanged tree is never sent again,
  a changed one never goes stale, and a tree is complete or absent (unpacked aside, then renamed);
- each job gets ``jobs/<run id>/`` for its spec's outputs, fetched back and then removed;
- a job stopped here (Ctrl-C, SIGTERM from Snakemake) is stopped there too, so the remote runner's
  own teardown runs.

ssh runs in batch mode (never prompts) and checks host keys strictly (``StrictHostKeyChecking=yes``):
against ``known_hosts_file`` when given, else the user's known hosts; an unknown host is refused, not
learnt, unless ``ssh_options`` says otherwise (they come before it, and ssh takes the first value of
each option).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Self

import dlvirt
from dlvirt.apps.base import CHECKSUM_SUFFIX, DATASET_INFO
from dlvirt.core.atomic import write_json_atomic
from dlvirt.core.formats import read_document
from dlvirt.core.owner import new_run_id, process_tag
from dlvirt.core.records import JobResult, JobSpec, run_record_problems
from dlvirt.core.signals import start_thread, stop_on_signals, wait_thread
from dlvirt.core.untrusted import Budget, OutputRefused, check_name, printable_bytes
from dlvirt.run.runner import publish_result

COMPLETE = ".dlvirt-complete"  # written last into a staged tree
SKIP = ("__pycache__",)
STOP_GRACE_S = 60              # how long a stopped remote runner may take to tear its platform down


class RemoteError(RuntimeError):
    pass


def tree_sha256(root: Path) -> str:
    """Content hash of every file under ``root`` (paths and bytes), skipping caches."""
    digest = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file() and not set(p.parts) & set(SKIP)):
        digest.update(str(path.relative_to(root)).encode() + b"\0")
        with open(path, "rb") as handle:
            while block := handle.read(1 << 20):
                digest.update(block)
        digest.update(b"\0")
    return digest.hexdigest()


@dataclass(frozen=True)
class SshHost:
    """One edge host of the config (``hosts.<site>``) and the ssh command line that reaches it."""

    site: str
    ssh: str                       # user@host, or a Host alias of ~/.ssh/config
    workdir: str                   # on the remote; relative = under the remote user's home
    python: str                    # the remote interpreter (needs dlvirt's dependencies for benchmarks)
    port: int | None = None
    identity_file: str | None = None
    known_hosts_file: str | None = None
    ssh_options: tuple[str, ...] = ()
    connect_timeout_s: int = 30

    @classmethod
    def from_settings(cls, site: str, settings: dict[str, Any]) -> SshHost:
        return cls(site=site, ssh=settings["ssh"], workdir=settings["workdir"], python=settings["python"],
                   port=settings.get("port"), identity_file=settings.get("identity_file"),
                   known_hosts_file=settings.get("known_hosts_file"),
                   ssh_options=tuple(settings.get("ssh_options", ())))

    def describe(self) -> dict[str, Any]:
        return {"site": self.site, "ssh": self.ssh, "port": self.port, "workdir": self.workdir,
                "python": self.python, "transport": "openssh"}

    def argv(self, script: str) -> list[str]:
        """ssh running ``script`` with POSIX sh in the working directory (created if missing)."""
        options = ["BatchMode=yes", f"ConnectTimeout={self.connect_timeout_s}", "ServerAliveInterval=15",
                   "ServerAliveCountMax=4", *self.ssh_options, "StrictHostKeyChecking=yes"]
        argv = ["ssh"]
        if self.port is not None:
            argv += ["-p", str(self.port)]
        if self.identity_file:
            argv += ["-i", self.identity_file]
            options.append("IdentitiesOnly=yes")
        if self.known_hosts_file:
            options.append(f"UserKnownHostsFile={self.known_hosts_file}")
        for option in options:
            argv += ["-o", option]
        wd = shlex.quote(self.workdir)
        return [*argv, "--", self.ssh, "sh -c " + shlex.quote(f"mkdir -p {wd} && cd {wd} && {script}")]

    def run(self, script: str, timeout_s: float = 600, stdin: IO[bytes] | None = None) -> str:
        """Run ``script`` remotely; its stdout, or RemoteError with its stderr."""
        try:
            proc = subprocess.run(self.argv(script), stdin=stdin or subprocess.DEVNULL, capture_output=True,
                                  timeout=timeout_s, check=False)
        except subprocess.TimeoutExpired:
            raise RemoteError(f"host {self.site} ({self.ssh}): no answer within {timeout_s:.0f} s") from None
        if proc.returncode != 0:
            raise RemoteError(f"host {self.site} ({self.ssh}): `{script[:200]}` failed ({proc.returncode}): "
                              f"{proc.stderr.decode(errors='replace').strip()[-2000:]}")
        return proc.stdout.decode(errors="replace")

    # -- files --------------------------------------------------------------------------------------
    def stage(self, local: Path, remote: str) -> bool:
        """Make ``remote`` (under the workdir) a complete copy of the directory ``local``, unless it
        already is one. Returns whether anything was sent."""
        if self.run(f"test -e {shlex.quote(remote)}/{COMPLETE} && echo present || echo absent").strip() == "present":
            return False
        target = shlex.quote(remote)
        parent = shlex.quote(str(Path(remote).parent))
        # unpacked aside and renamed when complete; a broken transfer removes its partial copy
        unpack = (f"mkdir -p {parent} && tmp=$(mktemp -d {parent}/.incoming.XXXXXX) || exit 1; "
                  f"if tar -xf - -C \"$tmp\" && touch \"$tmp/{COMPLETE}\"; then "
                  f"if [ -e {target} ]; then rm -rf \"$tmp\"; else mv \"$tmp\" {target}; fi; "
                  f"else rm -rf \"$tmp\"; exit 1; fi")
        excludes = [f"--exclude={name}" for name in SKIP]
        with subprocess.Popen(["tar", *excludes, "-C", str(local), "-cf", "-", "."],
                              stdout=subprocess.PIPE) as tar:
            try:
                self.run(unpack, timeout_s=3600, stdin=tar.stdout)
            finally:
                tar.kill()
        return True

    def fetch(self, remote: str, local: Path) -> None:
        """Copy the remote directory ``remote`` into the local directory ``local``.

        The edge host is not trusted with this host's files: the archive is unpacked by
        ``extract_untrusted`` (directories and regular files with plain names only, capped, no owner
        or mode kept), refused whole if any member breaks those rules; at most 1 MiB may follow the
        archive, and of what ssh says (kept in a temporary file, not in memory) the tail is reported."""
        local.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile() as stderr, \
                subprocess.Popen(self.argv(f"tar -C {shlex.quote(remote)} -cf - ."), stdin=subprocess.DEVNULL,
                                 stdout=subprocess.PIPE, stderr=stderr) as ssh:
            assert ssh.stdout is not None
            try:
                extract_untrusted(ssh.stdout, local)
                if len(ssh.stdout.read(TRAILER_MAX_BYTES + 1)) > TRAILER_MAX_BYTES:
                    raise OutputRefused(f"more than {TRAILER_MAX_BYTES} bytes follow the archive's end")
            except (tarfile.TarError, OSError, OutputRefused) as refused:
                ssh.kill()
                ssh.wait()
                raise RemoteError(f"host {self.site}: the archive of {remote} was refused: {refused}") from None
            ssh.wait()
            stderr.seek(max(0, os.fstat(stderr.fileno()).st_size - 2000))
            said = stderr.read().decode(errors="replace").strip()
        if ssh.returncode != 0:
            raise RemoteError(f"host {self.site}: fetching {remote} failed: {said}")

    def stage_code(self) -> str:
        """This dlvirt package on the remote (content-addressed); returns the PYTHONPATH entry."""
        package = Path(dlvirt.__file__).resolve().parent
        remote = f"code/{tree_sha256(package)}"
        self.stage(package, f"{remote}/dlvirt")
        # the remote interpreter must import this copy, not a dlvirt installed there
        where = self.run(self.python_command(remote, "-c 'import dlvirt; print(dlvirt.__file__)'")).strip()
        if not where.endswith(f"/{remote}/dlvirt/__init__.py"):
            raise RemoteError(f"host {self.site}: {self.python} imports dlvirt from {where}, not from the staged "
                              f"{remote}; remove that installation or point hosts.{self.site}.python elsewhere")
        return remote

    def python_command(self, code: str, args: str) -> str:
        """The remote interpreter running ``args`` with the staged code ahead of anything installed."""
        return f'PYTHONPATH="$PWD/{code}" exec {shlex.quote(self.python)} {args}'


# Extension headers (a long name, pax records) are small; a chain of them is refused early (tarfile
# reads each one whole into memory and recurses through a chain).
EXTENSION_MAX_BYTES = 64 << 10
EXTENSION_RUN_MAX = 2
MEMBER_TYPES = (tarfile.REGTYPE, tarfile.AREGTYPE, tarfile.DIRTYPE)
EXTENSION_TYPES = (tarfile.GNUTYPE_LONGNAME, tarfile.XHDTYPE)
TRAILER_MAX_BYTES = 1 << 20   # what may follow the archive's end (tar pads to its record size)


def extract_untrusted(stream: IO[bytes], dest: Path, budget: Budget | None = None) -> None:
    """Unpack the tar ``stream`` into the empty directory ``dest`` as data only, checked here rather
    than by tarfile's ``data`` filter (which some supported Pythons have with known bypasses): only
    directories and regular files with plain relative names (``check_name`` for every component),
    within ``budget`` (entries, bytes, depth; the default caps). Links, devices, FIFOs, sparse and
    contiguous files, ``/x``, ``../x``, long-name and pax chains are refused from their header, and so
    is a member whose header size breaks the byte cap, before anything of it is written. Nothing keeps
    the archive's owner or mode (files 0644, or 0755 when executable; directories 0755), and nothing is
    written through a symbolic link. Raises OutputRefused (or tarfile.TarError for a broken archive);
    what was unpacked before a refusal stays in ``dest`` for the caller to remove."""
    budget = budget or Budget("the archive")
    run = [0]  # extension headers in a row

    class Header(tarfile.TarInfo):
        @classmethod
        def frombuf(cls, buf: bytes | bytearray, encoding: str, errors: str) -> Self:
            info = super().frombuf(buf, encoding, errors)
            if info.type in EXTENSION_TYPES:
                run[0] += 1
                if run[0] > EXTENSION_RUN_MAX or info.size > EXTENSION_MAX_BYTES:
                    raise OutputRefused(f"the archive has an extension header of {info.size} bytes after "
                                        f"{run[0] - 1} others; dlvirt reads back only short ones")
            elif info.type in MEMBER_TYPES:
                run[0] = 0
            else:
                raise OutputRefused(f"the archive's member {info.name[:200]!r} is of tar type {info.type!r}; "
                                    "dlvirt reads back only directories and regular files")
            return info

    top = os.open(dest, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        with tarfile.open(fileobj=stream, mode="r|", tarinfo=Header) as archive:
            for info in archive:
                parts = _member_parts(info.name)
                if info.sparse is not None:  # pax sparse records name a real size of their own
                    raise OutputRefused(f"the archive's member {info.name[:200]!r} is a sparse file")
                if not parts:
                    continue  # "." itself
                budget.take(len(parts) - 1, info.size)  # a directory's data is read (and skipped) too
                _unpack_member(archive, info, parts, top)
    finally:
        os.close(top)


def _member_parts(name: str) -> list[str]:
    """The checked components of an archive member's name (``./`` in front is tar's -C dir .)."""
    if name.startswith("/"):
        raise OutputRefused(f"the archive's member {name[:200]!r} has an absolute name")
    parts = name.split("/")
    while parts and parts[0] == ".":
        parts.pop(0)
    if parts and parts[-1] == "":
        parts.pop()  # a directory's trailing "/"
    for part in parts:
        check_name(part, f"the archive (member {name[:200]!r})")
    return parts


def _unpack_member(archive: tarfile.TarFile, info: tarfile.TarInfo, parts: list[str], top: int) -> None:
    directory = os.dup(top)
    try:
        for part in parts[:-1] if info.isreg() else parts:
            with contextlib.suppress(FileExistsError):
                os.mkdir(part, 0o755, dir_fd=directory)
            inner = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=directory)
            os.close(directory)
            directory = inner
        if not info.isreg():
            return
        try:
            fd = os.open(parts[-1], os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                         0o755 if info.mode & 0o100 else 0o644, dir_fd=directory)
        except FileExistsError:
            raise OutputRefused(f"the archive holds {info.name[:200]!r} twice") from None
        source = archive.extractfile(info)
        assert source is not None  # a regular file
        written = 0
        with os.fdopen(fd, "wb") as target:
            while block := source.read(min(1 << 20, info.size - written)):
                target.write(block)
                written += len(block)
        if written != info.size:
            raise OutputRefused(f"the archive ends inside {info.name[:200]!r}")
    finally:
        os.close(directory)


def remote_facts(host: SshHost) -> dict[str, Any]:
    """The remote machine's host facts, measured there by the same code that writes results/host.json."""
    code = host.stage_code()
    probe = ("import json, sys; from dlvirt.apps import job_packages; from dlvirt.system.hostinfo import facts; "
             "json.dump(facts(job_packages()), sys.stdout)")
    facts: dict[str, Any] = json.loads(host.run(host.python_command(code, f"-c {shlex.quote(probe)}")))
    facts["site"] = host.describe()
    return facts


def write_remote_facts(host: SshHost, output: Path) -> None:
    write_json_atomic(output, remote_facts(host))


def _local_only_inputs(spec: JobSpec, dataset_dir: Path) -> str | None:
    """Inputs that live outside the dataset folder, which this version does not copy to an edge host."""
    app = spec.app
    if read_document(dataset_dir / DATASET_INFO, "dataset info").get("root"):
        return f"apps.{app}.dataset.path (a real dataset on this host)"
    if (spec.app_settings.get("weights") or {}).get("path"):
        return f"apps.{app}.weights.path (a weights file on this host)"
    return None


def run_job_remote(host: SshHost, spec: JobSpec, output: Path, loadgen_dir: Path) -> JobResult:
    """Run one benchmark job on ``host`` and write its result here, as ``runner.run_job`` does locally."""
    stop_on_signals()
    dataset_dir = Path(spec.dataset_dir)
    unsupported = _local_only_inputs(spec, dataset_dir)
    if unsupported:
        raise RemoteError(f"host {host.site}: {unsupported} cannot be used on an edge host yet; "
                          "run that app there with synthetic inputs and random weights")
    code = host.stage_code()
    dataset_sha = tree_sha256(dataset_dir)
    dataset = f"datasets/{spec.app}-{dataset_sha}"
    host.stage(dataset_dir, dataset)
    weights = None
    if spec.weights_file is not None:  # its folder, addressed by its checksum file (the remote runner checks it)
        local = Path(spec.weights_file)
        digest = Path(f"{local}{CHECKSUM_SUFFIX}").read_text().split()[0]
        host.stage(local.parent, f"weights/{spec.app}-{digest}")
        weights = f"weights/{spec.app}-{digest}/{local.name}"
    job_dir = f"jobs/{new_run_id()}"
    remote_spec = dataclasses.replace(spec, dataset_dir=dataset, weights_file=weights).to_dict()
    # the spec (config sections, URLs) goes over ssh's stdin: no command line there or here holds it
    bench = f"-m dlvirt bench --spec - --output {job_dir}/run.json --loadgen-dir {job_dir}/loadgen"
    script = f"mkdir -p {job_dir} && echo $$ > {job_dir}/pid && {host.python_command(code, bench)}"
    output = Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    fetched = Path(tempfile.mkdtemp(prefix=f".fetch-{process_tag()}-", dir=output.parent))
    try:
        # the remote runner's output (progress, errors) goes into this job's log as it comes
        with subprocess.Popen(host.argv(script), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, bufsize=0) as ssh:
            assert ssh.stdin is not None and ssh.stdout is not None
            log = start_thread(functools.partial(_pass_on_printable, ssh.stdout), "dlvirt-remote-log")
            try:
                _send(ssh.stdin, json.dumps(remote_spec, sort_keys=True).encode())
                returncode = ssh.wait(timeout=float(spec.timeout_s) + STOP_GRACE_S + 300)
            except BaseException:
                ssh.kill()
                stop_remote_job(host, job_dir)
                raise
            wait_thread(log, timeout_s=10)
        if returncode != 0:
            raise RemoteError(f"host {host.site}: the remote benchmark job failed ({returncode}); see the log above")
        host.fetch(job_dir, fetched)
        result = dataclasses.replace(
            JobResult.read(fetched / "run.json"), site=host.site,
            transport={**host.describe(), "code_sha256": code.split("/")[-1], "dataset_sha256": dataset_sha})
        # the edge host's record counts only as this job's, verified, with sound times
        problems = run_record_problems(result, output)
        if (result.spec.tool, result.spec.app, result.spec.scenario, result.spec.replicate) != (
                spec.tool, spec.app, spec.scenario, spec.replicate):
            problems.append(f"it is the record of {result.tool} {result.app} {result.scenario_name} "
                            f"replicate {result.replicate}")
        if problems:
            raise RemoteError(f"host {host.site}: its run record was refused: {'; '.join(problems)}")
        publish_result(result, output, fetched / "loadgen", loadgen_dir)
        return result
    finally:
        shutil.rmtree(fetched, ignore_errors=True)
        try:
            host.run(f"rm -rf {job_dir}")
        except RemoteError as err:  # never hide the job's own outcome behind a failed cleanup
            print(f"dlvirt: could not remove {job_dir} on host {host.site}: {err}", file=sys.stderr)


def _send(pipe: IO[bytes], data: bytes) -> None:
    """Write ``data`` to the unbuffered ``pipe`` and close it (an ssh gone already: its status says why)."""
    with contextlib.suppress(BrokenPipeError):
        view = memoryview(data)
        while view:
            view = view[pipe.write(view) or 0:]
    pipe.close()


def _pass_on_printable(stream: IO[bytes]) -> None:
    """What the edge host sends on the job's output, into this job's log without control characters."""
    while block := stream.read(1 << 16):
        sys.stdout.buffer.write(printable_bytes(block))
        sys.stdout.flush()


def stop_remote_job(host: SshHost, job_dir: str) -> None:
    """SIGTERM the remote runner (its teardown runs) and wait for it, SIGKILL after the grace time."""
    wait = f"for i in $(seq {STOP_GRACE_S * 5}); do kill -0 $pid 2>/dev/null || exit 0; sleep 0.2; done"
    try:
        host.run(f"pid=$(cat {job_dir}/pid 2>/dev/null) || exit 0; kill -TERM $pid 2>/dev/null || exit 0; "
                 f"{wait}; kill -KILL $pid", timeout_s=STOP_GRACE_S + 30)
    except RemoteError as err:  # the host went away: say so, and let the interruption go on
        print(f"dlvirt: could not stop the job in {job_dir} on host {host.site}: {err}", file=sys.stderr)
