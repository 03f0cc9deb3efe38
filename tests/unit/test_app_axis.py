"""Adding an app is its module, its tests, its schema section and its lock lines (issue 46, item 6).

For every registered app, the places outside its own that name it are listed, and the list must be
empty. What names it: its name, label, class or module, the distributions and Debian packages it
declares and its weights files' names, as a string in use or a name in code (comments and docstrings are prose). Its own
places: its modules under src/dlvirt/apps/ (the shared ones may name what it declares, not the app),
its registry entry (the import and the ``_IMPLEMENTED`` line of dlvirt/apps/__init__.py), tests/, its
schema sections (apps.<app>; study.apps, which lists the registry) and the lock and setup lines
(envs/, setup.sh and pyproject.toml are not scanned; ``LOCK_LINES`` in code). Not scanned either:
what is about specific apps by nature and not needed to run one (the paper's claims and figure
catalog, compare's simulated studies, the studies in config/, benchmark scripts, notebooks, docs).
"""

from __future__ import annotations

import ast
import functools
import io
import re
import tokenize
from pathlib import Path
from typing import Any

import pytest
import yaml

from conftest import REPO, source_strings
from dlvirt.apps import CLASSES

APPS = REPO / "src" / "dlvirt" / "apps"
# the app axis itself: what every app uses, naming none
SHARED = {APPS / name for name in ("__init__.py", "base.py", "backend.py", "torch_runtime.py", "download.py")}
REGISTRY = APPS / "__init__.py"
BY_NATURE = ("src/dlvirt/analysis/claims/", "src/dlvirt/analysis/catalog.py", "src/dlvirt/analysis/compare_simulate.py")
SCHEMA = REPO / "workflow" / "schemas" / "config.schema.yaml"
# lock lines in code: the CN image's build installs the lock with setup.sh's pip options (torch's CPU wheel)
LOCK_LINES = {("src/dlvirt/platforms/container_image.py", "torch-2.13.0+cpu-*.whl")}


def _identifiers(name: str) -> tuple[set[str], set[str]]:
    """What names the app: its name, label, class and module; and what it declares (its distributions,
    its weights files' names), which the shared app modules (its framework's runtime) may name too."""
    cls = CLASSES[name]
    return ({name, cls.kind.label, cls.__name__, cls.__module__.rsplit(".", 1)[-1]},
            {*cls.kind.framework_packages, *cls.kind.packages, *cls.kind.system_packages, *cls.weights_file_names})


def _words(text: str) -> set[str]:
    """Its words, its dotted and hyphenated words too (tensorflow-cpu, model.pt; regex escapes undone)."""
    text = text.replace("\\", "")
    return {*re.findall(r"\w+", text), *re.findall(r"[\w.-]+", text)}


@functools.cache
def _in_use(path: Path) -> list[tuple[int, str, set[str]]]:
    """(line, text, its words) of every string in use and every name in the code of ``path`` (not
    comments, not docstrings)."""
    tokens = tokenize.generate_tokens(io.StringIO(path.read_text()).readline)
    names = [(token.start[0], token.string) for token in tokens if token.type == tokenize.NAME]
    return [(line, text, _words(text)) for line, text in [*source_strings(path), *names]]


def _registry_lines() -> set[int]:
    tree = ast.parse(REGISTRY.read_text())
    lines = {node.lineno for node in tree.body
             if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("dlvirt.apps.")}
    for node in tree.body:
        if isinstance(node, ast.AnnAssign | ast.Assign):
            targets = [node.target] if isinstance(node, ast.AnnAssign) else node.targets
            if any(isinstance(t, ast.Name) and t.id == "_IMPLEMENTED" for t in targets):
                lines |= set(range(node.lineno, (node.end_lineno or node.lineno) + 1))
    return lines


def _code_places(app: str, root: Path = REPO) -> list[str]:
    own, declared = _identifiers(app)
    files = [*sorted((root / "src").rglob("*.py")), *sorted((root / "workflow").rglob("*.smk")),
             *[root / "Snakefile"] * (root / "Snakefile").exists()]
    registry = _registry_lines()
    places = []
    for path in files:
        relative = path.relative_to(root).as_posix()
        names = own if path in SHARED else own | declared
        if relative.startswith(BY_NATURE) or (path.is_relative_to(APPS) and path not in SHARED):
            continue
        places += [f"{relative}:{line}: {text!r}" for line, text, words in _in_use(path)
                   if names & words and not (path == REGISTRY and line in registry)
                   and (relative, text) not in LOCK_LINES]
    return places


def _schema_places(app: str, node: Any, path: tuple[str, ...] = ()) -> list[str]:
    """Where the schema names ``app`` (a key or a value) outside its sections; descriptions are prose."""
    own = (("properties", "apps", "properties", app), ("properties", "study", "properties", "apps"))
    if any(path[:len(prefix)] == prefix for prefix in own):
        return []
    if path and path[-1] == app:
        return [".".join(path)]
    if isinstance(node, dict):
        return [place for key, value in node.items() if key != "description"
                for place in _schema_places(app, value, (*path, str(key)))]
    if isinstance(node, list):
        return [place for i, value in enumerate(node) for place in _schema_places(app, value, (*path, str(i)))]
    return [".".join(path)] if node == app else []


def places_outside(app: str) -> list[str]:
    """The places outside an app's own that name it: files of the code (file:line) and schema paths."""
    schema = yaml.safe_load(SCHEMA.read_text())
    return _code_places(app) + [f"{SCHEMA.relative_to(REPO)}: {p}" for p in _schema_places(app, schema)]


@pytest.mark.parametrize("app", sorted(CLASSES))
def test_an_app_is_named_only_in_its_own_places(app):
    assert places_outside(app) == []


def test_the_check_finds_an_app_named_elsewhere(tmp_path):
    """The listing sees what it must: a name in code, a string in use, a schema key of another section."""
    module = tmp_path / "src" / "dlvirt" / "plan" / "special.py"
    module.parent.mkdir(parents=True)
    module.write_text('"""ic in a docstring is prose."""\n# so is IC in a comment\n'
                      'from dlvirt.apps.ic import ImageClassification\nSETTINGS = {"nlp": 1}\n'
                      'FRAMEWORKS = ("tensorflow", "torch")\nWEIGHTS = r"model\\.weights\\.h5"\n')
    assert sorted(_code_places("ic", tmp_path)) == [
        "src/dlvirt/plan/special.py:3: 'ImageClassification'", "src/dlvirt/plan/special.py:3: 'ic'",
        "src/dlvirt/plan/special.py:5: 'tensorflow'", "src/dlvirt/plan/special.py:5: 'torch'",
        "src/dlvirt/plan/special.py:6: 'model\\\\.weights\\\\.h5'"]
    assert _code_places("nlp", tmp_path) == ["src/dlvirt/plan/special.py:4: 'nlp'",
                                             "src/dlvirt/plan/special.py:5: 'torch'"]
    schema = {"properties": {"apps": {"properties": {"ic": {}}}, "dlbs": {"properties": {"apps": {
        "properties": {"ic": {}}, "description": "per app, e.g. ic"}}}}}
    assert _schema_places("ic", schema) == ["properties.dlbs.properties.apps.properties.ic"]
