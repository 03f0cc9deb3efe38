"""Platforms and apps describe themselves: the registries hold their declarations, and everything
else derives from them. The schema's enums equal the registries, no other module names a platform
or app, planning imports no engine SDK or framework, and analysis no platform or app module."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import yaml
from snakemake.utils import validate

from conftest import REPO, smoke_config, source_strings, tool_env
from dlvirt.apps import CLASSES as APP_CLASSES
from dlvirt.apps import KINDS as APP_KINDS
from dlvirt.plan.planner import TOOLS, kinds
from dlvirt.platforms import CLASSES as PLATFORM_CLASSES
from dlvirt.platforms import KINDS as PLATFORM_KINDS

SCHEMA = yaml.safe_load((REPO / "workflow" / "schemas" / "config.schema.yaml").read_text())
# Only these may name a specific platform or app: the declarations themselves, and what is about
# specific ones by nature (the paper's claims, the figure catalog, compare's simulated studies).
MAY_NAME = ("src/dlvirt/platforms/", "src/dlvirt/apps/", "src/dlvirt/analysis/claims/",
            "src/dlvirt/analysis/catalog.py", "src/dlvirt/analysis/compare_simulate.py")


def test_the_schema_enums_are_the_registries():
    study = SCHEMA["properties"]["study"]["properties"]
    platforms, apps = sorted(PLATFORM_KINDS), sorted(APP_KINDS)
    assert sorted(study["apps"]["items"]["enum"]) == apps
    assert sorted(study["tools"]["items"]["enum"]) == sorted(TOOLS)
    assert sorted(SCHEMA["$defs"]["matrix_block"]["properties"]["platforms"]["items"]["enum"]) == platforms
    sections = SCHEMA["properties"]["platforms"]["properties"]
    shared = {"placement"}  # settings all platforms share, beside one section per platform
    assert sorted(set(sections) - shared) == platforms
    assert sorted(SCHEMA["properties"]["apps"]["properties"]) == apps
    # a tool's per-app overrides name no app: any app may have them, the config check refuses a non-app
    assert "properties" not in SCHEMA["properties"]["dlbs"]["properties"]["apps"]


def test_each_kind_is_declared_once_and_consistently():
    for name, cls in PLATFORM_CLASSES.items():
        assert cls.name == cls.kind.name == name
    for name, app_cls in APP_CLASSES.items():
        assert app_cls.name == app_cls.kind.name == name and app_cls.framework == app_cls.kind.framework
    orders = [k.order for k in PLATFORM_KINDS.values()]
    assert orders == sorted(orders) and len(set(orders)) == len(orders)
    assert len({k.colour for k in PLATFORM_KINDS.values()}) == len(PLATFORM_KINDS)
    assert kinds().platform_order == list(PLATFORM_KINDS)
    assert kinds().app_order == list(APP_KINDS)


def test_no_other_module_or_rule_names_a_platform_or_app():
    names = set(PLATFORM_KINDS) | set(APP_KINDS)
    files = [*sorted((REPO / "src").rglob("*.py")), *sorted((REPO / "workflow").rglob("*.smk")), REPO / "Snakefile"]
    wrong = [f"{path.relative_to(REPO)}:{line}: {text!r}"
             for path in files if not path.relative_to(REPO).as_posix().startswith(MAY_NAME)
             for line, text in source_strings(path) if names & set(re.findall(r"[A-Za-z]+", text))]
    assert not wrong, "\n".join(wrong)


def _imported_after(code: str) -> list[str]:
    probe = ("import sys\n" + code + "\nprint(json.dumps(sorted(m for m in sys.modules)))")
    out = subprocess.run([sys.executable, "-c", "import json\n" + probe], check=True, capture_output=True,
                         text=True, env=tool_env(), cwd=REPO)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_planning_imports_no_engine_sdk_or_framework():
    config = smoke_config(guests=True, host_check=True)
    validate(config, str(REPO / "workflow" / "schemas" / "config.schema.yaml"))  # fills in the defaults
    modules = _imported_after(
        "from dlvirt.plan.planner import expand, plan_document\n"
        "from dlvirt.system.hostinfo import capabilities\n"
        f"config = json.loads({json.dumps(json.dumps(config))})\n"
        "caps = capabilities()\n"
        "plan_document(config, expand(config, caps), caps.cores)")
    heavy = [m for m in modules if m.split(".")[0] in ("docker", "libvirt", "tensorflow", "torch", "transformers")]
    assert not heavy


def test_analysis_imports_no_platform_or_app_module():
    modules = _imported_after("import dlvirt.analysis.figures, dlvirt.analysis.report, dlvirt.analysis.tables, "
                              "dlvirt.analysis.claims, dlvirt.analysis.aggregate")
    assert not [m for m in modules if m.startswith(("dlvirt.platforms", "dlvirt.apps", "dlvirt.plan.planner"))]


def test_package_lists_derive_from_the_apps_declarations(monkeypatch):
    from dlvirt.apps import job_packages
    from dlvirt.platforms.guestimage import HARNESS_DISTRIBUTIONS, JOB_DISTRIBUTIONS
    from dlvirt.system import hostinfo

    declared = [name for kind in APP_KINDS.values() for name in (*kind.framework_packages, *kind.packages)]
    assert set(job_packages()) == set(declared) and len(job_packages()) == len(set(declared))
    assert set(JOB_DISTRIBUTIONS) == {*HARNESS_DISTRIBUTIONS, *declared}
    # the tables' framework column reads them from plan.json (analysis imports no app module)
    frameworks = dict.fromkeys(name for kind in APP_KINDS.values() for name in kind.framework_packages)
    assert kinds().framework_packages == list(frameworks)
    # an environment setup.sh did not make: its stack is read from the declared packages' builds
    monkeypatch.setattr(hostinfo.sys, "prefix", "/nonexistent")
    monkeypatch.setattr(hostinfo, "package_versions", lambda names: dict.fromkeys(names, "2.0+cpu"))
    assert hostinfo.python_stack(["torch"])["stack"] == "cpu"
    monkeypatch.setattr(hostinfo, "package_versions", lambda names: dict.fromkeys(names, "2.0"))
    assert hostinfo.python_stack(["torch"])["stack"] == "gpu"
