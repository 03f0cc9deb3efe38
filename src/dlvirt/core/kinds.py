"""What the rest of dlvirt needs to know about a kind of platform, app or measurement tool, declared once
by its module (``dlvirt.platforms.<name>``, ``dlvirt.apps.<name>``, ``dlvirt.run.tools.<name>``) and
collected by the registries.

Everything that used to list platforms or apps by hand derives from these declarations: scenario
validation, the Snakemake wildcards and image inputs, the schema check, figure order and colour,
the report's and claims' lists, cleanup. Analysis never imports a platform or app module: the plan
writes the display facts (``display()``) into ``results/plan.json`` and analysis reads them there.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal, Protocol, TypeVar

from dlvirt.core.errors import ConfigError

# PlatformKind.image: the container image the CN platform runs (rule cn_image builds it).
CONTAINER_IMAGE = "container"


@dataclass(frozen=True)
class PlatformKind:
    name: str                     # the paper's short name, e.g. "VMCN"
    title: str                    # what it is, in words
    order: int                    # its place in figures, tables and legends (lowest first)
    colour: int                   # its colour: an index into seaborn's colour-blind palette
    virtualised: bool             # anything between the app and the host's kernel (BM: no)
    why_no_pin: str = ""          # why it can never be pinned ("" = it can)
    why_no_gpu: str = ""          # why it can never use a GPU ("" = it can)
    image: str | None = None      # what its jobs wait for: None, CONTAINER_IMAGE, or a guest image variant
    runs_on_edge: bool = False    # whether edge hosts run it (images are built here and not staged yet)
    gpu_image: str | None = None  # the guest image variant its GPU scenarios boot (a GPU driver inside)

    @property
    def guest_variant(self) -> str | None:
        """The guest image variant it boots (``dlvirt.platforms.guestimage``), None if it boots none."""
        return None if self.image in (None, CONTAINER_IMAGE) else self.image

    def display(self) -> dict[str, Any]:
        """The facts analysis uses (order, colour, virtualised, title), as plan.json carries them."""
        return {"name": self.name, "title": self.title, "order": self.order, "colour": self.colour,
                "virtualised": self.virtualised}


@dataclass(frozen=True)
class AppKind:
    name: str                     # the short name, e.g. "nlp"
    title: str                    # the application, e.g. "Question answering"
    model: str                    # the model, e.g. "BERT-large"
    framework: str                # "tensorflow" or "pytorch" (also the name of its conda env)
    dataset: str                  # the dataset it reads, e.g. "SQuAD v1.1 dev"
    order: int                    # its place in figures and tables (lowest first)
    processors: tuple[str, ...] = ("CPU", "GPU")
    why_no_gpu: str = ""          # why it cannot use a GPU, where "GPU" is not in processors
    # the Python distributions its jobs import beyond the harness's: its framework's (whose versions the
    # tables report), then the others (pre-processing, tokenizers, a CPU build); guest images install
    # them, run records and host facts report their versions (dlvirt.apps.job_packages)
    framework_packages: tuple[str, ...] = ()
    packages: tuple[str, ...] = ()
    # the Debian packages its jobs' native code loads beyond a minimal Debian with Python (a runtime
    # library its framework's build links to): the CN base image and the guest images with a Python
    # stack install them (dlvirt.apps.job_system_packages); a host that runs ./setup.sh has them
    system_packages: tuple[str, ...] = ()
    check: bool = False           # a plumbing check, not a DL application: only where a study asks for it

    @property
    def label(self) -> str:
        """How figures and tables name it: IC, SR, NLP, RS."""
        return self.name.upper()

    @property
    def gpu_support(self) -> str:
        return "yes" if "GPU" in self.processors else f"no: {self.why_no_gpu}"

    def display(self) -> dict[str, Any]:
        facts = asdict(self)
        facts["processors"] = list(self.processors)
        facts["framework_packages"] = list(self.framework_packages)
        facts["packages"] = list(self.packages)
        facts["system_packages"] = list(self.system_packages)
        return facts


Measure = Literal["E2E", "model-only"]


@dataclass(frozen=True)
class ToolKind:
    name: str                     # the short name (study.tools); also its path component in results/
    title: str                    # what it is, in words
    measure: Measure              # what a repetition's time is: E2E (read, pre-process, infer, post-process)
    order: int                    # its place in tables and listings (lowest first: the paper's measurement)
    phases: tuple[str, ...]       # the phases its repetitions time, of pre_s, infer_s, post_s
    section: str | None = None    # its own config section (the schema's), merged per app into a job's spec
    # the LoadGen scenarios it runs in (study.scenarios): a tool without LoadGen runs Offline-style only
    scenarios: tuple[str, ...] = ("Offline",)

    @property
    def preprocessing(self) -> bool:
        """Whether its repetitions read and pre-process samples (E2E) or time the model alone."""
        return "pre_s" in self.phases

    def display(self) -> dict[str, Any]:
        return {"name": self.name, "title": self.title, "measure": self.measure, "order": self.order,
                "phases": list(self.phases)}


@dataclass(frozen=True)
class Kinds:
    """The display facts of every registered platform and app, in figure order: what analysis knows
    about them, read from plan.json (``from_document``) or built by the plan (``document``)."""

    platforms: tuple[dict[str, Any], ...]
    apps: tuple[dict[str, Any], ...]

    @classmethod
    def from_document(cls, document: dict[str, Any]) -> Kinds:
        return cls(tuple(sorted(document["platforms"], key=lambda p: p["order"])),
                   tuple(sorted(document["apps"], key=lambda a: a["order"])))

    def document(self) -> dict[str, Any]:
        return {"platforms": list(self.platforms), "apps": list(self.apps)}

    @property
    def platform_order(self) -> list[str]:
        return [p["name"] for p in self.platforms]

    @property
    def app_order(self) -> list[str]:
        return [a["name"] for a in self.apps]

    @property
    def virtualised(self) -> tuple[str, ...]:
        return tuple(p["name"] for p in self.platforms if p["virtualised"])

    @property
    def baseline(self) -> str:
        """What normalised figures divide by: the first platform that is not virtualised (bare metal)."""
        return next(p["name"] for p in self.platforms if not p["virtualised"])

    def colour(self, platform: str) -> int:
        return int(next(p["colour"] for p in self.platforms if p["name"] == platform))

    @property
    def framework_packages(self) -> list[str]:
        """The apps' framework distributions, in app order (none in plans written before they were declared)."""
        return list(dict.fromkeys(name for a in self.apps for name in a.get("framework_packages", [])))

    def app(self, name: str) -> dict[str, Any]:
        return next(a for a in self.apps if a["name"] == name)


class Declared(Protocol):
    """A platform, app or tool class: what the registries collect."""

    @property
    def kind(self) -> PlatformKind | AppKind | ToolKind: ...


D = TypeVar("D", bound=Declared)


def registry(classes: list[D]) -> dict[str, D]:
    """The classes by their kind's name, in their kind's order."""
    return {cls.kind.name: cls for cls in sorted(classes, key=lambda c: c.kind.order)}


def look_up(classes: dict[str, D], name: str, what: str) -> D:
    if name not in classes:
        raise ConfigError(f"{what} {name!r} is not implemented (known: {', '.join(sorted(classes))})")
    return classes[name]
