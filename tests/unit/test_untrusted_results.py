"""What comes back from a platform, an edge host or a results folder is checked before it counts:
run records (verified, sound times, content that matches the path, one run id per launch), an edge
host's archive (links, devices, escapes and oversize refused), a guest's out-disk (regular files only, capped) and a
container's out folder (regular files only, no setuid)."""

from __future__ import annotations

import codecs
import io
import json
import math
import os
import shutil
import stat
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from conftest import FIXTURES
from dlvirt.analysis.aggregate import summarise
from dlvirt.core.records import JobResult, RecordError, read_run_records, run_record_problems
from dlvirt.core.untrusted import MAX_DEPTH, Budget, OutputRefused, printable, printable_bytes
from dlvirt.platforms import guest
from dlvirt.platforms.base import Expected, PlatformError, copy_regular_files, verify
from dlvirt.platforms.guest import read_job_disk
from dlvirt.run.remote import extract_untrusted
from dlvirt.system.observe import privileges

FIXTURE = FIXTURES / "runs" / "mlperf-ic-BM-1-VNL-CPU.json"
LAYOUT = "runs/mlperf/ic/BM/1/VNL/CPU/1.json"


def record(tmp_path: Path, change=None, where: str = LAYOUT) -> Path:
    """The fixture's run record, changed by ``change(document)``, written at ``tmp_path/where``."""
    document = json.loads(FIXTURE.read_text())
    if change is not None:
        change(document)
    path = tmp_path / where
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document))  # json writes NaN as NaN, as a careless writer would
    return path


def test_a_sound_record_in_its_place_counts(tmp_path):
    path = record(tmp_path)
    assert run_record_problems(JobResult.read(path), path) == []
    assert summarise([path]).iloc[0]["replicates"] == 1


def _set(*keys, value):
    def change(document):
        node = document
        for key in keys[:-1]:
            node = node[key]
        node[keys[-1]] = value
    return change


@pytest.mark.parametrize(("change", "message"), [
    (_set("verified", value=False), "it is not verified"),
    (_set("runs", 1, "e2e_s", value=math.nan), r"runs\[1\]\.e2e_s is nan, not a positive finite time"),
    (_set("runs", 0, "e2e_s", value=math.inf), r"runs\[0\]\.e2e_s is inf"),
    (_set("runs", 0, "e2e_s", value=0), r"runs\[0\]\.e2e_s is 0, not a positive"),
    (_set("runs", 1, "e2e_s", value=-1.0), r"runs\[1\]\.e2e_s is -1\.0"),
    (_set("runs", 0, "phases", "pre_s", value=-0.5), r"runs\[0\]\.phases\.pre_s is -0\.5, not a non-negative"),
    (_set("model_load_s", value=math.nan), "model_load_s is nan"),
    (_set("app", value="nlp"), "app is 'nlp' but its path says 'ic'"),
    (_set("scenario", "cores", value=2), "cores is '2' but its path says '1'"),
    (_set("replicate", value=2), "replicate is '2' but its path says '1'"),
    (_set("dataset", value={}), "dataset lacks 'source'"),
    (_set("runs", 0, "threads", value={"intra_op": 1}), r"runs\[0\]\.threads lacks 'policy'"),
    (_set("runs", 0, "started_utc", value="yesterday"), r"runs\[0\]\.started_utc 'yesterday' is not an ISO time"),
])
def test_a_record_that_must_not_count_is_refused_naming_the_file(tmp_path, change, message):
    path = record(tmp_path, change)
    with pytest.raises(RecordError, match=rf"^{path}: refused as a run record: .*{message}"):
        summarise([path])


def test_one_launch_counted_twice_is_refused(tmp_path):
    first = record(tmp_path)
    def round_two(document):
        document["replicate"] = document["spec"]["replicate"] = 2

    second = record(tmp_path, round_two, "runs/mlperf/ic/BM/1/VNL/CPU/2.json")
    with pytest.raises(RecordError, match=rf"^{second}: .*run_id '9440-74dd47e2' is also {first}'s"):
        read_run_records([first, second])


def test_an_edge_record_must_be_in_its_sites_folder(tmp_path):
    path = record(tmp_path, _set("site", value="rpi4"), f"sites/rpi5/{LAYOUT}")
    with pytest.raises(RecordError, match="site is 'rpi4' but its path says 'rpi5'"):
        read_run_records([path])
    path = record(tmp_path, _set("site", value="rpi4"), f"sites/rpi4/{LAYOUT}")
    assert read_run_records([path])[0].site == "rpi4"


def test_a_broken_document_is_an_error_naming_the_file_not_a_traceback(tmp_path):
    path = tmp_path / LAYOUT
    path.parent.mkdir(parents=True)
    path.write_text('{"tool": "mlperf",')
    proc = subprocess.run([sys.executable, "-m", "dlvirt", "aggregate", "--output", str(tmp_path / "s.csv"), str(path)],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert f"{path}: not a JSON document" in proc.stderr
    nan = record(tmp_path, _set("runs", 0, "e2e_s", value=math.nan))
    proc = subprocess.run([sys.executable, "-m", "dlvirt", "aggregate", "--output", str(tmp_path / "s.csv"), str(nan)],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and "e2e_s is nan" in proc.stderr
    assert not (tmp_path / "s.csv").exists()


# -- an edge host's archive --------------------------------------------------------------------------
# Each shape is refused by dlvirt's own checks, whatever this Python's tarfile filter would do with it
# (3.11.7's has the CVE-2025-4517 family of bypasses).

def _tar(members: list[tuple[tarfile.TarInfo, bytes]], fmt: int = tarfile.GNU_FORMAT) -> io.BytesIO:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=fmt) as archive:
        for info, data in members:
            if info.type in tarfile.REGULAR_TYPES:
                info.size = len(data)
            archive.addfile(info, io.BytesIO(data) if data else None)
    buffer.seek(0)
    return buffer


def _member(name: str, mode: int = 0o644, kind: bytes = tarfile.REGTYPE, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.mode, info.type, info.linkname, info.uid, info.gid = mode, kind, link, 1234, 1234
    return info


def _symlink(name: str, link: str) -> tuple[tarfile.TarInfo, bytes]:
    return _member(name, kind=tarfile.SYMTYPE, link=link), b""


def _cve_2025_4517() -> list[tuple[tarfile.TarInfo, bytes]]:
    """The published shape: symbolic links through directories with names long enough that the
    resolved path passes PATH_MAX (where realpath stops resolving), then a link that climbs out by
    them and a file written through it."""
    component, steps, path = "d" * 247, "abcdefghijklmnop", ""
    members = []
    for step in steps:
        members += [(_member(os.path.join(path, component), kind=tarfile.DIRTYPE), b""),
                    _symlink(os.path.join(path, step), component)]
        path = os.path.join(path, component)
    climb = os.path.join(*steps, "l" * 254)
    members += [_symlink(climb, "../" * len(steps)),
                _symlink("escape", f"{climb}/../../../../../../../../../../../../../../../tmp"),
                (_member("escape/dlvirt-cve-test"), b"planted")]
    return members


BYPASSES = {
    "symlink out": [_symlink("./link", "/etc")],
    "symlink then a file through it": [_symlink("./up", ".."), (_member("./up/escaped"), b"x")],
    "hardlink out": [(_member("./passwd", kind=tarfile.LNKTYPE, link="/etc/passwd"), b"")],
    "hardlink through a symlink": [_symlink("./up", ".."),
                                   (_member("./hl", kind=tarfile.LNKTYPE, link="up/escaped"), b"")],
    "CVE-2025-4517 long-path symlink chain": _cve_2025_4517(),
    "absolute name": [(_member("/tmp/dlvirt-absolute-escape"), b"x")],
    "dot-dot": [(_member("../escaped"), b"x")],
    "dot-dot inside": [(_member("./a/../../escaped"), b"x")],
    "long name too deep": [(_member("/".join(["d" * 200] * 20) + "/f"), b"x")],
    "character device": [(_member("./dev", kind=tarfile.CHRTYPE), b"")],
    "block device": [(_member("./blk", kind=tarfile.BLKTYPE), b"")],
    "fifo": [(_member("./fifo", kind=tarfile.FIFOTYPE), b"")],
    "contiguous file": [(_member("./contig", kind=tarfile.CONTTYPE), b"x")],
    "odd name": [(_member("./a\nb"), b"x")],
}


@pytest.mark.parametrize("shape", sorted(BYPASSES))
def test_every_escape_shape_is_refused_with_nothing_written_outside(tmp_path, shape):
    dest = tmp_path / "inside" / "fetched"
    dest.mkdir(parents=True)
    with pytest.raises(OutputRefused):
        extract_untrusted(_tar([(_member("./run.json"), b"{}"), *BYPASSES[shape]]), dest)
    made = list(dest.rglob("*"))
    assert all(not p.is_symlink() and (p.is_dir() or p.is_file()) for p in made)
    assert not any(p.stat().st_nlink > 1 for p in made if p.is_file())
    assert sorted(p.name for p in tmp_path.rglob("*") if dest not in (p, *p.parents)) == ["inside"]
    assert not Path("/tmp/dlvirt-cve-test").exists() and not Path("/tmp/dlvirt-absolute-escape").exists()


def test_a_sound_archive_comes_back_as_plain_files(tmp_path):
    dest = tmp_path / "fetched"
    dest.mkdir()
    extract_untrusted(_tar([(_member("./", kind=tarfile.DIRTYPE), b""), (_member("./run.json"), b"{}"),
                            (_member("./loadgen/rep-0001/log.txt"), b"x" * 3000),
                            (_member("./tool", 0o4755), b"#!/bin/sh\n"),
                            (_member("./" + "n" * 150), b"long names travel as GNU or pax headers")]), dest)
    tool = (dest / "tool").stat()
    assert not tool.st_mode & (stat.S_ISUID | stat.S_ISGID) and tool.st_uid == os.getuid()  # no setuid, no owner
    assert (dest / "loadgen/rep-0001/log.txt").read_bytes() == b"x" * 3000 and (dest / "run.json").read_text() == "{}"
    assert (dest / ("n" * 150)).is_file()
    pax = tmp_path / "pax"
    pax.mkdir()
    extract_untrusted(_tar([(_member("./" + "p" * 150), b"y")], tarfile.PAX_FORMAT), pax)
    assert (pax / ("p" * 150)).read_bytes() == b"y"


def _header(info: tarfile.TarInfo) -> bytes:
    return info.tobuf(tarfile.GNU_FORMAT, "utf-8", "surrogateescape")


def test_a_giant_member_is_refused_from_its_header(tmp_path):
    """10 GiB announced: refused before a byte of it is read or written (the stream holds none)."""
    dest = tmp_path / "fetched"
    dest.mkdir()
    giant = _member("./giant")
    giant.size = 10 << 30
    with pytest.raises(OutputRefused, match="more than dlvirt reads back"):
        extract_untrusted(io.BytesIO(_header(giant)), dest)
    sparse = _member("./sparse", kind=tarfile.GNUTYPE_SPARSE)
    sparse.size = 512
    with pytest.raises(OutputRefused, match="tar type b'S'"):
        extract_untrusted(io.BytesIO(_header(sparse) + bytes(2048)), dest)
    pax_sparse = _member("./pax-sparse")
    pax_sparse.pax_headers = {"GNU.sparse.major": "1", "GNU.sparse.minor": "0", "GNU.sparse.name": "pax-sparse",
                              "GNU.sparse.realsize": str(10 << 30)}
    with pytest.raises(OutputRefused):
        extract_untrusted(_tar([(pax_sparse, b"1\n0\n0\n".ljust(512, b"\0"))], tarfile.PAX_FORMAT), dest)
    huge_name = _member("./x")
    huge_name.pax_headers = {"path": "y" * (1 << 20)}  # a 1 MiB pax record is not read into memory
    with pytest.raises(OutputRefused, match="extension header"):
        extract_untrusted(_tar([(huge_name, b"")], tarfile.PAX_FORMAT), dest)
    assert list(dest.iterdir()) == []
    with pytest.raises(OutputRefused, match="more than dlvirt reads back"):
        extract_untrusted(_tar([(_member("./a"), b"x" * 600), (_member("./b"), b"x" * 600)]), tmp_path,
                          Budget("the archive", max_bytes=1000))


class ManyMembers(io.RawIOBase):
    """A tar stream of ``count`` empty files, each header made only when it is read."""

    def __init__(self, count: int) -> None:
        self.count, self.made, self.pending = count, 0, b""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        while len(self.pending) < len(buffer) and self.made <= self.count:
            self.pending += _header(_member(f"./f{self.made}")) if self.made < self.count else bytes(1024)
            self.made += 1
        size = min(len(buffer), len(self.pending))
        buffer[:size], self.pending = self.pending[:size], self.pending[size:]
        return size


def test_a_million_members_are_refused_at_the_cap(tmp_path):
    dest = tmp_path / "fetched"
    dest.mkdir()
    stream = ManyMembers(1_000_000)
    with pytest.raises(OutputRefused, match="at most 10000 entries"):
        extract_untrusted(io.BufferedReader(stream), dest)
    assert stream.made < 10_100  # refused early: the rest of the million never read
    assert len(list(dest.iterdir())) == 10_000


# -- a guest's out-disk -----------------------------------------------------------------------------

def _job_disk(tmp_path: Path, fill) -> Path:
    staging = tmp_path / "staging"
    (staging / "out" / "rep-0001").mkdir(parents=True)
    (staging / "exitcode").write_text("0\n")
    fill(staging / "out")
    disk = tmp_path / "job.img"
    subprocess.run(["mkfs.ext4", "-q", "-F", "-N", "4096", "-d", str(staging), str(disk), "16M"], check=True)
    return disk


@pytest.mark.skipif(shutil.which("debugfs", path="/usr/sbin:/sbin:/usr/bin") is None, reason="needs debugfs")
def test_the_guests_out_disk_yields_regular_files_only_and_is_capped(tmp_path):
    def fill(out: Path) -> None:
        (out / "harness.json").write_text("{}")
        (out / "rep-0001" / "log.txt").write_text("x" * 1000)
        (out / "setuid").write_text("#!/bin/sh\n")
        (out / "setuid").chmod(0o4755)
        (out / "passwd").symlink_to("/etc/passwd")
        os.mkfifo(out / "fifo")

    disk = _job_disk(tmp_path, fill)
    dest = tmp_path / "read"
    assert read_job_disk(disk, dest) == 0
    out = dest / "out"
    assert sorted(str(p.relative_to(out)) for p in out.rglob("*")) == ["harness.json", "rep-0001", "rep-0001/log.txt",
                                                                       "setuid"]
    assert not (out / "setuid").stat().st_mode & stat.S_ISUID
    with pytest.raises(PlatformError, match="more than dlvirt reads back"):
        read_job_disk(disk, tmp_path / "small", max_bytes=500)
    with pytest.raises(PlatformError, match="more than dlvirt reads back"):
        read_job_disk(disk, tmp_path / "few", max_files=2)
    named = _job_disk(tmp_path / "named", lambda out: (out / 'a"b').write_text("x"))
    with pytest.raises(PlatformError, match="holds an entry named 'a\"b'"):
        read_job_disk(named, tmp_path / "named-read")
    broken = _job_disk(tmp_path / "broken", lambda out: (out / "a\nb").write_text("x"))
    with pytest.raises(PlatformError, match="holds an entry dlvirt cannot read back"):
        read_job_disk(broken, tmp_path / "broken-read")


def _counting_debugfs(monkeypatch) -> list[int]:
    """The real debugfs runs; the list gets the number of commands of each run."""
    runs: list[int] = []
    real = guest._debugfs_script

    def counted(disk, commands, cwd=None):
        runs.append(len(commands))
        return real(disk, commands, cwd)

    monkeypatch.setattr(guest, "_debugfs_script", counted)
    return runs


@pytest.mark.skipif(shutil.which("debugfs", path="/usr/sbin:/sbin:/usr/bin") is None, reason="needs debugfs")
def test_a_deep_or_wide_directory_tree_on_the_out_disk_is_refused_within_the_cap(tmp_path, monkeypatch):
    runs = _counting_debugfs(monkeypatch)

    def deep(out: Path) -> None:
        (out / "/".join(["d"] * 40)).mkdir(parents=True)

    with pytest.raises(PlatformError, match=f"nests deeper than dlvirt reads back .more than {MAX_DEPTH}"):
        read_job_disk(_job_disk(tmp_path / "deep", deep), tmp_path / "deep-read")
    assert len(runs) == MAX_DEPTH + 3 and max(runs) <= 2  # the top, then one run per level: not the 40
    runs.clear()

    def wide(out: Path) -> None:
        for i in range(1500):
            (out / f"d{i}").mkdir()

    with pytest.raises(PlatformError, match="at most 1000 entries"):
        read_job_disk(_job_disk(tmp_path / "wide", wide), tmp_path / "wide-read", max_files=1000)
    assert len(runs) == 2  # the top, then /out: no directory below it is listed
    made = list((tmp_path / "wide-read" / "out").iterdir())
    assert len(made) <= 1000


# -- a container's out folder -----------------------------------------------------------------------

def test_only_regular_files_leave_a_containers_out_folder(tmp_path):
    src = tmp_path / "container-out"
    (src / "rep-0001").mkdir(parents=True)
    (src / "harness.json").write_text("{}")
    (src / "rep-0001" / "summary.txt").write_text("VALID")
    (src / "setuid").write_text("x")
    (src / "setuid").chmod(0o4755)
    (src / "shadow").symlink_to("/etc/shadow")
    (src / "up").symlink_to(tmp_path)
    os.mkfifo(src / "fifo")
    dest = tmp_path / "out"
    copy_regular_files(src, dest)
    assert sorted(str(p.relative_to(dest)) for p in dest.rglob("*")) == ["harness.json", "rep-0001",
                                                                         "rep-0001/summary.txt", "setuid"]
    assert not (dest / "setuid").stat().st_mode & stat.S_ISUID and not (dest / "shadow").is_symlink()
    with pytest.raises(PlatformError, match="at most 3 entries"):
        copy_regular_files(src, tmp_path / "few", Budget("the out folder", max_entries=3))
    with pytest.raises(PlatformError, match="at most 10000 entries of 6 bytes"):
        copy_regular_files(src, tmp_path / "small", Budget("the out folder", max_bytes=6))
    deep = tmp_path / "deep"
    (deep / "/".join(["d"] * (MAX_DEPTH + 2))).mkdir(parents=True)
    with pytest.raises(PlatformError, match="nests deeper"):
        copy_regular_files(deep, tmp_path / "deep-copy")


def test_privileges_are_read_from_proc_and_checked(tmp_path):
    status = tmp_path / "status"
    status.write_text("Name:\tpython\nUid:\t65534\t65534\t65534\t65534\nCapEff:\t0000000000000000\nNoNewPrivs:\t1\n"
                      "Seccomp:\t2\n")
    seen = privileges(status)
    assert seen == {"uid": 65534, "euid": 65534, "cap_eff": "0000000000000000", "no_new_privs": 1, "seccomp": 2}
    mine = privileges()
    assert mine["uid"] == os.getuid() and mine["euid"] == os.geteuid()
    observed = json.loads(FIXTURE.read_text())["runs"][0]["observed"]
    asked = Expected(check_quota=False, privileges=seen)
    assert verify(asked, {**observed, "privileges": seen}) == []
    root = {**seen, "uid": 0, "cap_eff": "000001fffeffffff"}
    assert verify(asked, {**observed, "privileges": root}) == [
        "uid 0 inside != the 65534 asked (least privilege)",
        "cap_eff '000001fffeffffff' inside != the '0000000000000000' asked (least privilege)"]
    assert verify(asked, observed) != []  # a record without the facts is not taken on trust


def test_guest_and_container_output_reaches_the_log_without_escape_sequences():
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    console = b"\x1b]0;retitled\x07boot \xc3\xa9\r\n\x1b[2J\x9b\x00done\n"
    assert guest._console_text(decoder, console) == "]0;retitledboot \u00e9\n[2J\ufffddone\n"
    assert printable("a\u009b31mb\tc") == "a31mb\tc"
    assert printable_bytes("\x1b[31mr\u00e9d\x7f\r\n".encode()) == "[31mr\u00e9d\n".encode()
