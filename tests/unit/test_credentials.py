"""Credentials in URLs (dlvirt.core.credentials): a mirror or engine URL carrying ``user:secret@``
reaches no command line, log or record of a launch, and only a root-only file where a tool needs it."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import REPO, noop_job_spec
from dlvirt.core.credentials import redact, redacted, split_login
from dlvirt.system import cgroups

SECRET = "s3cret-43"
MIRROR = f"http://dlvirt:{SECRET}@mirror.invalid:8080/debian"


def test_userinfo_is_redacted_wherever_a_url_stands():
    assert redact(f"+ debootstrap bookworm /r {MIRROR}") == "+ debootstrap bookworm /r http://***@mirror.invalid:8080/debian"
    assert redact("ssh://bob@edge tcp://10.0.0.1:2376 unix:///run/x.sock") == "ssh://***@edge tcp://10.0.0.1:2376 unix:///run/x.sock"
    assert redacted({"a": [MIRROR, 1], "b": None}) == {"a": ["http://***@mirror.invalid:8080/debian", 1], "b": None}


def test_a_login_is_split_off_and_written_as_wget_and_apt_read_it():
    url, login = split_login("https://us%40er:pa%3Ass@mirror.invalid/debian")
    assert url == "https://mirror.invalid/debian" and login is not None
    assert login.netrc() == "machine mirror.invalid login us@er password pa:ss\n"
    assert split_login(MIRROR)[1].apt_auth() == f"machine http://mirror.invalid:8080 login dlvirt password {SECRET}\n"  # type: ignore[union-attr]
    assert split_login("http://mirror.invalid/debian") == ("http://mirror.invalid/debian", None)
    with pytest.raises(ValueError, match="netrc"):
        split_login("http://a:b%20c@m/")[1].netrc()  # type: ignore[union-attr]


def test_debootstrap_gets_the_mirror_without_its_login_and_a_private_netrc():
    from dlvirt.platforms.container_image import mirror_login

    with mirror_login(MIRROR) as (url, env, login):
        assert url == "http://mirror.invalid:8080/debian" and login is not None and env is not None
        netrc = Path(env["HOME"]) / ".netrc"
        assert netrc.read_text() == f"machine mirror.invalid login dlvirt password {SECRET}\n"
        assert os.stat(netrc).st_mode & 0o777 == 0o600 and os.stat(env["HOME"]).st_mode & 0o777 == 0o700
    assert not netrc.exists()
    with mirror_login("http://mirror.invalid/debian") as (url, env, login):
        assert (url, env, login) == ("http://mirror.invalid/debian", None, None)


def rule_shell(rule_file: Path) -> str:
    """The shell command of the one rule in ``rule_file`` that runs ``dlvirt bench``."""
    (block,) = re.findall(r'shell:\n((?:\s+".*"\n)+)', rule_file.read_text())
    return "".join(json.loads(line.strip()) for line in block.splitlines())


def descendants(root: int) -> list[int]:
    parents = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            parents[int(entry)] = int(stat.rpartition(")")[2].split()[1])
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo += [child for child, parent in parents.items() if parent == pid]
    return found


@pytest.mark.skipif(cgroups.version() is None, reason="BM launches need a cgroup controller")
def test_a_launch_shows_a_url_login_in_no_command_line_log_or_record(noop_dataset, tmp_path):
    """A noop BM launch run as the benchmark rule runs it, its spec carrying a mirror URL with a login:
    no command line of the runner or its harness holds it while the job runs (the rule's shell
    execs the runner, which reads the spec from stdin), nor its log, record or LoadGen files."""
    spec = noop_job_spec(noop_dataset, None, platform_settings={"placement": "compact", "debian_mirror": MIRROR,
                                                                  "engine": {"host": f"tcp://dlvirt:{SECRET}@127.0.0.1:1"}})
    run, loadgen, log = tmp_path / "r.json", tmp_path / "lg", tmp_path / "bench.log"
    command = rule_shell(REPO / "workflow/rules/benchmark.smk").replace(":q}", "}").format(  # as Snakemake fills it
        params=type("P", (), {"spec": shlex.quote(json.dumps(spec))}), log=shlex.quote(str(log)),
        output=type("O", (), {"run": shlex.quote(str(run)), "loadgen": shlex.quote(str(loadgen))}))
    assert "--spec -" in command and command.startswith("exec ")
    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]])
    runner = subprocess.Popen(["bash", "-c", f"set -euo pipefail; {command}"], env={**os.environ, "PATH": path})
    seen: set[str] = set()
    while runner.poll() is None:
        for pid in descendants(runner.pid):
            try:
                argv = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if argv and not argv.startswith("bash "):  # the shell itself, for the instant before it execs the runner
                seen.add(argv)
        time.sleep(0.05)
    assert runner.returncode == 0, log.read_text()[-3000:]
    assert any("dlvirt bench --spec -" in argv for argv in seen) and any("dlvirt.run.launch" in argv for argv in seen)
    assert not [argv for argv in seen if SECRET in argv]
    for path in [log, run, *loadgen.rglob("*")]:
        assert not path.is_file() or SECRET not in path.read_text(errors="replace"), path
    record = json.loads(run.read_text())
    assert record["spec"]["platform_settings"]["debian_mirror"] == "http://***@mirror.invalid:8080/debian"
