"""Refuse a bad config before any job is built, naming the file and line or the config key.

Three stages, each a ``ConfigError``:
- ``load_config_file``: the file itself (YAML syntax, duplicate keys, a top level that is not a
  mapping), with file and line. Snakemake keeps the last of two equal keys, silently;
- ``check_schema``: the JSON schema with the key path and a one-line hint instead of the whole
  schema, integers that are integers (``16.0`` is not) and finite numbers (``.nan``/``.inf`` pass
  every ``minimum``);
- ``check_inputs``: what the schema cannot see: the files and folders the config names exist and
  are the right kind, a weights file matches its checksum (cached by size and mtime),
  ``study.memory`` is a size docker accepts and fits the host (with a guest's overhead).
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from dlvirt.core.atomic import read_json, write_json_atomic
from dlvirt.core.errors import ConfigError
from dlvirt.core.memory import KEY as MEMORY_KEY
from dlvirt.core.memory import parse_mib

DOCKER_MIN_MEMORY = 6 << 20  # docker refuses a smaller --memory
HINT_CHARS = 120  # of the schema's description, after the error: a hint, not the documentation
# Per-platform memory settings that study.memory replaced (CN, VMCN's container, the guests' RAM).
PLATFORM_MEMORY_KEYS = ("memory", "container_memory", "memory_mib")
# keys that are gone, and what took their place (a close match could point elsewhere)
REMOVED_KEYS = {("study", "warmup_max"): "warm-ups are a count fixed in advance now: study.warmup_repetitions "
                                         "(`dlvirt warmup RUNS` suggests one per app)"}


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses a key given twice in one mapping (naming both lines)."""


def _construct_mapping(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
    seen: dict[Any, int] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        line = key_node.start_mark.line + 1
        if key in seen:
            raise ConfigError(f"{key_node.start_mark.name}:{line}: key {key!r} given twice (first on line "
                              f"{seen[key]}); YAML would silently keep only the last")
        seen[key] = line
    return loader.construct_mapping(node, deep=deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def load_config_file(path: Path) -> dict[str, Any]:
    """A config file (YAML or JSON) as a mapping; any problem is a ConfigError naming file and line."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise ConfigError(f"config file {path}: cannot be read ({err})") from None
    try:
        loader = _StrictLoader(text)
        loader.name = str(path)
        try:
            data = loader.get_single_data()
        finally:
            loader.dispose()
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
        hint = " (tabs cannot indent YAML: use spaces)" if "\t" in text and "tab" in str(err).lower() else ""
        raise ConfigError(f"{where}: not valid YAML: {err.problem or err.context}{hint}") from None
    except yaml.YAMLError as err:
        raise ConfigError(f"{path}: not valid YAML: {err}") from None
    if not isinstance(data, dict):
        kind = "empty" if data is None else f"a {type(data).__name__}, not a mapping of config keys"
        raise ConfigError(f"{path}:1: the config file is {kind} (expected keys such as study:, apps:)")
    return data


def _key(path: list[Any]) -> str:
    """A JSON path as a config key: study.matrix[0].platforms[1]."""
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


def _is_integer(_checker: Any, value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_finite_number(_checker: Any, value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


_STRICT_TYPES = jsonschema.Draft202012Validator.TYPE_CHECKER.redefine_many(
    {"integer": _is_integer, "number": _is_finite_number})
_StrictValidator = jsonschema.validators.extend(jsonschema.Draft202012Validator, type_checker=_STRICT_TYPES)


def _known_keys(node: dict[str, Any], defs: dict[str, Any]) -> list[str]:
    """The keys a schema object allows: its own properties and those of the $defs it includes."""
    known = list(node.get("properties", {}))
    for sub in node.get("allOf", []):
        known += defs.get(sub.get("$ref", "").rsplit("/", 1)[-1], {}).get("properties", {})
    return sorted(known)


def _unknown(error: jsonschema.ValidationError, defs: dict[str, Any]) -> list[str]:
    """The keys an additional/unevaluated-properties error is about that the schema does not know."""
    if error.validator not in ("additionalProperties", "unevaluatedProperties"):
        return []
    return [k for k in error.instance if k not in _known_keys(error.schema, defs)]


def _hint(error: jsonschema.ValidationError, defs: dict[str, Any]) -> str:
    value = error.instance
    if error.validator == "type" and isinstance(value, float) and not math.isfinite(value):
        return "; numbers must be finite (no .nan, .inf)"
    if error.validator == "type" and isinstance(value, float) and "integer" in str(error.validator_value):
        return f"; write {int(value)}, not {value}" if value.is_integer() else "; a whole number is needed"
    if error.validator in ("additionalProperties", "unevaluatedProperties"):
        return f"; known keys here: {', '.join(_known_keys(error.schema, defs))}"
    description = " ".join(str(error.schema.get("description", "")).split())
    if len(description) > HINT_CHARS:
        description = description[:HINT_CHARS].rsplit(" ", 1)[0] + " …"
    return f" ({description})" if description else ""


def check_schema(config: dict[str, Any], schema_path: Path) -> None:
    """The config against the schema, strictly typed; the first error as key: what (hint), not
    the whole schema."""
    _check_against(config, yaml.safe_load(Path(schema_path).read_text()))


def check_app_settings(app: str, settings: dict[str, Any], schema_path: Path) -> None:
    """One app's section (``apps.<app>``, as ``python -m dlvirt dataset`` is given it) against its
    part of the schema; ConfigError naming the key (``apps.ic.dataset.count``) otherwise."""
    schema = yaml.safe_load(Path(schema_path).read_text())
    apps = schema["properties"]["apps"]["properties"]
    if app not in apps:
        raise ConfigError(f"apps.{app}: unknown app (one of {', '.join(apps)})")
    _check_against({"apps": {app: settings}}, {"$defs": schema.get("$defs", {}), "type": "object",
                                               "properties": {"apps": {"type": "object",
                                                                       "properties": {app: apps[app]}}}})


def _check_against(config: dict[str, Any], schema: dict[str, Any]) -> None:
    defs = schema.get("$defs", {})
    errors = list(_StrictValidator(schema).iter_errors(config))
    # a key that fails inside allOf also counts as unevaluated: report why it fails instead
    errors = [e for e in errors if e.validator != "unevaluatedProperties" or _unknown(e, defs)] or errors
    if not errors:
        return
    error = jsonschema.exceptions.best_match(errors)
    path = list(error.absolute_path)
    what = error.message
    unknown = _unknown(error, defs)
    if unknown:
        path.append(unknown[0])
        what = f"unknown key ({what})"
        close = difflib.get_close_matches(unknown[0], _known_keys(error.schema, defs), n=1)
        if path[0] == "platforms" and unknown[0] in PLATFORM_MEMORY_KEYS:
            what += f"; one memory size serves every platform now: {MEMORY_KEY}"
        elif tuple(path) in REMOVED_KEYS:
            what += f"; {REMOVED_KEYS[tuple(path)]}"
        elif close:
            what += f"; did you mean {close[0]}?"
    raise SchemaError(f"{_key(path)}: {what}{_hint(error, defs)}", path)


class SchemaError(ConfigError):
    """A config the schema refuses, with the path of the key it is about (``["study", "replicates"]``)."""

    def __init__(self, message: str, path: list[Any]) -> None:
        super().__init__(message)
        self.path = path


def origin(files: Iterable[Any], path: list[Any]) -> str | None:
    """``FILE:LINE`` of the last of ``files`` that sets the key at ``path`` (as Snakemake merges
    them, the last one counts), None where none does (a default, or a --config option)."""
    for file in reversed([str(f) for f in dict.fromkeys(map(str, files))]):
        try:
            node = yaml.compose(Path(file).read_text(encoding="utf-8"), Loader=yaml.SafeLoader)
        except (OSError, UnicodeDecodeError, yaml.YAMLError):
            continue
        for part in path:
            if isinstance(node, yaml.MappingNode):
                node = next((value for key, value in node.value if key.value == str(part)), None)
            elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
                node = node.value[part]
            else:
                node = None
            if node is None:
                break
        if node is not None:
            return f"{file}:{node.start_mark.line + 1}"
    return None


def _read_cache(cache_file: Path | None) -> dict[str, Any]:
    if cache_file is None or not cache_file.is_file():
        return {}
    try:
        cache = read_json(cache_file)
    except ValueError:
        return {}
    return cache if isinstance(cache, dict) else {}


def _sha256_cached(path: Path, cache: dict[str, Any]) -> str:
    """The file's sha256, recomputed (and put into ``cache``) only when the file is no longer the
    one the cached digest was computed from (``dlvirt.apps.base.file_identity``)."""
    from dlvirt.apps.base import hash_record, known_sha256

    key = str(path.resolve())
    digest = known_sha256(path, cache.get(key))
    if digest is None:
        cache[key] = hash_record(path)
        digest = cache[key]["sha256"]
    return digest


def _check_file_with_checksum(section: dict[str, Any], key: str, cache: dict[str, Any]) -> None:
    path, want = section.get("path"), section.get("sha256")
    if path is None:
        if want:
            raise ConfigError(f"{key}.sha256 is set but {key}.path is not: the checksum would check nothing")
        return
    file = Path(path)
    if not file.is_file():
        raise ConfigError(f"{key}.path {path}: {'is not a file' if file.exists() else 'does not exist'}")
    if want:
        got = _sha256_cached(file, cache)
        if got != want:
            raise ConfigError(f"{key}.path {path}: sha256 {got} does not match {key}.sha256 {want}")


def _check_path(value: str | None, key: str, kind: str, expand_user: bool = False) -> None:
    if value is None:
        return
    path = Path(value).expanduser() if expand_user else Path(value)
    if not path.exists():
        raise ConfigError(f"{key} {value}: does not exist")
    if kind == "dir" and not path.is_dir():
        raise ConfigError(f"{key} {value}: is not a folder")
    if kind == "file" and not path.is_file():
        raise ConfigError(f"{key} {value}: is not a file")


def _planned_platforms(config: dict[str, Any]) -> set[str]:
    return {p for block in config["study"]["matrix"] for p in block["platforms"]}


def check_inputs(config: dict[str, Any], cache_file: Path | None = None, host_memory: int | None = None) -> None:
    """Every path the config names (in any section, used by the study or not) exists and is the
    right kind; weights and vocab match their checksums; ``study.memory`` is at least docker's
    minimum and, as each planned platform takes it (a guest adds its overhead), fits ``host_memory``
    (bytes, None = not checked: planning for another machine). The checksums computed go into
    ``cache_file`` only when every check passed: a refused config writes nothing."""
    cache = _read_cache(cache_file)
    known = dict(cache)
    _check_inputs(config, cache, host_memory)
    if cache_file is not None and cache != known:
        write_json_atomic(cache_file, cache)


def _check_inputs(config: dict[str, Any], cache: dict[str, Any], host_memory: int | None) -> None:
    from dlvirt.apps import app_class
    from dlvirt.platforms import CLASSES as PLATFORM_CLASSES
    from dlvirt.platforms.guestimage import IMAGE_FILES
    from dlvirt.run.tools import CLASSES as TOOL_CLASSES
    from dlvirt.run.tools import tool_class

    for app in config["study"]["apps"]:
        settings = config["apps"][app]
        dataset = settings["dataset"].get("path")
        if dataset is not None:
            why = app_class(app).dataset_path_problem(Path(dataset))
            if why:
                raise ConfigError(f"apps.{app}.dataset.path {dataset}: {why}")
        _check_file_with_checksum(settings.get("weights", {}), f"apps.{app}.weights", cache)
        if "vocab" in settings:
            _check_file_with_checksum(settings["vocab"], f"apps.{app}.vocab", cache)
        bounds = settings["dataset"].get("lines_per_sample")
        if bounds and bounds["min"] > bounds["max"]:
            raise ConfigError(f"apps.{app}.dataset.lines_per_sample: min {bounds['min']} > max {bounds['max']}")
    # A path the config names must exist even where the study does not use it now (a section left
    # for later that names a wrong path would pass today and fail the day it is used); checksums and
    # image contents are checked where used only (they cost a read of the file).
    for app, settings in config.get("apps", {}).items():
        if app not in config["study"]["apps"]:
            for part in ("dataset", "weights", "vocab"):
                _check_path((settings.get(part) or {}).get("path"), f"apps.{app}.{part}.path",
                            "any" if part == "dataset" else "file")
    for tool in TOOL_CLASSES:
        tool_class(tool).check_config(config, _check_path)
    platforms = _planned_platforms(config)
    # What each platform's section holds (paths, memory sizes), its class declares.
    for name in sorted(platforms):
        cls, section = PLATFORM_CLASSES[name], config["platforms"][name]
        image_dir = section.get("image_dir")
        if cls.kind.guest_variant and image_dir is not None and Path(image_dir).is_dir():
            replaced = {"vmlinuz": section.get("kernel"), "initrd.img": section.get("initrd")}
            missing = [f for f in IMAGE_FILES if not replaced.get(f) and not (Path(image_dir) / f).is_file()]
            if missing:
                raise ConfigError(f"platforms.{name}.image_dir {image_dir}: lacks {', '.join(missing)}")
    for name, section in sorted(config.get("platforms", {}).items()):
        for key, kind in getattr(PLATFORM_CLASSES.get(name), "path_settings", {}).items():
            _check_path(section.get(key), f"platforms.{name}.{key}", kind)
        # the guest's GPU driver packages (VM): local files, checked like the paths above
        gpu_driver = section.get("gpu_driver") if isinstance(section, dict) else None  # platforms.placement: a word
        for i, deb in enumerate((gpu_driver or {}).get("debs") or []):
            _check_path(deb, f"platforms.{name}.gpu_driver.debs[{i}]", "file")
    for site, host in config.get("hosts", {}).items():
        # ssh expands ~ in both (-i and UserKnownHostsFile)
        _check_path(host.get("identity_file"), f"hosts.{site}.identity_file", "file", expand_user=True)
        _check_path(host.get("known_hosts_file"), f"hosts.{site}.known_hosts_file", "file", expand_user=True)
    memory_mib = parse_mib(config["study"]["memory"])
    if memory_mib << 20 < DOCKER_MIN_MEMORY:
        raise ConfigError(f"{MEMORY_KEY}: {config['study']['memory']!r} is below docker's minimum of 6m "
                          "(the container platforms' limit)")
    if host_memory and platforms:
        # the planned platform that takes the most of the host for it (a guest: its RAM)
        name = max(sorted(platforms), key=lambda n: PLATFORM_CLASSES[n].host_memory_mib(memory_mib))
        need = PLATFORM_CLASSES[name].host_memory_mib(memory_mib)
        if need << 20 > host_memory:
            taken = f"{memory_mib} MiB" + (f" + {need - memory_mib} MiB guest overhead ({name}'s RAM)"
                                           if need > memory_mib else "")
            raise ConfigError(f"{MEMORY_KEY}: {taken} is more than this host's memory ({host_memory >> 20} MiB)")


def check_config(config: dict[str, Any], files: Iterable[Any], schema_path: Path,
                 fill_defaults: Callable[[dict[str, Any]], None], cache_file: Path | None) -> None:
    """All three stages on ``config`` as merged from ``files``, in the workflow's order (the
    defaults are filled, by ``fill_defaults``, between the schema and the input checks)."""
    from dlvirt.system.hostinfo import memory_bytes

    for file in dict.fromkeys(map(str, files)):
        load_config_file(Path(file))
    try:
        check_schema(config, schema_path)
    except SchemaError as err:
        where = origin(files, err.path)
        if where is None:
            raise
        raise ConfigError(f"{where}: {err}") from None
    fill_defaults(config)
    check_inputs(config, cache_file, memory_bytes() if config["host_check"] else None)
