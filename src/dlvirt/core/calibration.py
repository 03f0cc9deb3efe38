"""The calibration document (``dlvirt calibrate``'s output) and its typed reader.

A calibration is measured on one kind of hardware (its identity: the summary's ``hardware`` label,
CPU model, CPUs, sockets, architecture) from two or more A/A blocks: the same study run again at
other times. Per platform it holds the variance components of a scenario's log launch mean: the
residual (launch to launch within a round), the round (drift within a study) and the block ("day":
between studies, beyond the rounds), each with its degrees of freedom. ``dlvirt compare`` adds the
day component to a between-study contrast; the claims add it to each contrast within a study (so a
verdict speaks beyond the study's day), ``plan --design`` sizes launches with it and the report shows
its plain words. Each refuses a calibration of other hardware (``require``).
A calibration whose blocks ran on several kinds lists them all: it links them (the block component
then includes the kinds' differences).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from dlvirt.core import formats
from dlvirt.core.atomic import write_text_atomic

ALPHA, POWER = 0.05, 0.8  # "what this host can tell apart": a one-sided test at ALPHA, found with POWER


def smallest_resolved(se: float, df: float, alpha: float = ALPHA, power: float = POWER) -> float:
    """The smallest relative difference a one-sided test at ``alpha`` on a contrast of standard error
    ``se`` (log scale) and ``df`` degrees of freedom finds with probability ``power`` (NaN: none)."""
    from scipy import stats as sps

    if not (se > 0 and df > 0):
        return math.nan
    return math.expm1((float(sps.t.ppf(1 - alpha, df)) + float(sps.t.ppf(power, df))) * se)


class CalibrationError(ValueError):
    """A calibration document that cannot be read; the message names the file and key."""


@dataclass(frozen=True)
class Components:
    """One platform's variance components of log(launch mean), each with its degrees of freedom."""

    residual: float
    residual_df: float
    round: float
    round_df: float
    day: float
    day_df: float
    scenarios: int


@dataclass(frozen=True)
class FalseAlarms:
    """``compare`` between the calibration's own blocks (no true change): how many of the compared
    scenarios came out slower or faster, without and with this calibration (in-sample)."""

    compared: int
    uncalibrated: int
    calibrated: int


@dataclass(frozen=True)
class Calibration:
    hardware: tuple[str, ...]  # the kinds of hardware its blocks ran on (the host identity)
    blocks: tuple[str, ...]  # the results folders, in the order given
    launches: int  # launches per scenario of the design it sizes (the blocks' own)
    platforms: dict[str, Components]
    false_alarms: FalseAlarms
    resolvable: dict[str, float] = field(default_factory=dict)  # platform: smallest relative difference
    path: str = ""  # where it was read from (not written)

    def covers(self, hardware: str) -> bool:
        return hardware in self.hardware

    def document(self) -> dict[str, Any]:
        content = asdict(self)
        content.pop("path")
        content["hardware"], content["blocks"] = list(self.hardware), list(self.blocks)
        return formats.stamped("calibration", content)

    def write(self, path: Path) -> None:
        import json

        write_text_atomic(Path(path), json.dumps(self.document(), indent=1) + "\n")


def require(calibration: Calibration, hardware: Iterable[str], whose: str) -> Calibration:
    """``calibration`` if it covers every kind of ``hardware`` (``whose``: e.g. "the study's
    main-host rows"); else CalibrationError naming its file and the kinds it lacks."""
    kinds = sorted(set(hardware))
    lacking = [k for k in kinds if not calibration.covers(k)]
    if not kinds or lacking:
        found = "; ".join(lacking) if lacking else "no recorded hardware"
        raise CalibrationError(f"{calibration.path}: a calibration of {'; '.join(calibration.hardware)}, not of "
                               f"{whose} ({found}); calibrate this hardware (dlvirt calibrate) or give none")
    return calibration


def read_calibration(path: str | Path) -> Calibration:
    """The calibration at ``path``; CalibrationError naming the file and the key that is wrong."""
    content = formats.read_document(path, "calibration")
    try:
        platforms = {str(name): Components(
            residual=float(c["residual"]), residual_df=float(c["residual_df"]), round=float(c["round"]),
            round_df=float(c["round_df"]), day=float(c["day"]), day_df=float(c["day_df"]),
            scenarios=int(c["scenarios"])) for name, c in content["platforms"].items()}
        return Calibration(
            hardware=tuple(str(h) for h in content["hardware"]), blocks=tuple(str(b) for b in content["blocks"]),
            launches=int(content["launches"]), platforms=platforms,
            false_alarms=FalseAlarms(**{k: int(v) for k, v in content["false_alarms"].items()}),
            resolvable={str(k): float(v) for k, v in content.get("resolvable", {}).items()}, path=str(path))
    except KeyError as err:
        raise CalibrationError(f"{path}: a calibration without key {err}") from None
    except (TypeError, ValueError, AttributeError) as err:
        raise CalibrationError(f"{path}: not a calibration document ({err})") from None
