"""Machine time: what a launch cost as measured, and how a projected total reads (``plan.estimate``
projects; the plan's log and the report print)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from dlvirt.core.records import JobResult, Repetition


def launch_overhead_s(record: JobResult) -> float:
    """Model load and boot of one launch."""
    return record.model_load_s + float(record.platform.get("boot_s") or 0)


def repetition_s(rep: Repetition) -> float:
    """One repetition's wall time from start to finish (E2E and what LoadGen does around it)."""
    return (datetime.fromisoformat(rep.finished_utc) - datetime.fromisoformat(rep.started_utc)).total_seconds()


def launch_machine_s(record: JobResult) -> float:
    """What one launch cost, as measured: its warm-ups and repetitions from start to finish, plus its
    model load and boot (provisioning the platform and writing the result not counted)."""
    return launch_overhead_s(record) + sum(repetition_s(r) for r in [*record.warmups, *record.runs])


def launch_cost_s(record: JobResult) -> float:
    """What a launch costs before its first counted repetition (Kalibera & Jones's c_launch): the
    platform's start-up to the harness (where recorded: CN's ``start_to_harness_s``), boot, model
    load and the warm-ups."""
    start = float(record.platform.get("start_to_harness_s") or 0)
    return start + launch_overhead_s(record) + sum(repetition_s(r) for r in record.warmups)


def hours(seconds: float) -> str:
    return f"{seconds / 3600:.2f} h" if seconds >= 360 else f"{seconds / 60:.1f} min"


def totals_line(totals: dict[str, Any]) -> str:
    """One sentence for the plan's log and the report."""
    if not totals["records"]:
        return ("no run records on this host yet: nothing to project from (after a first study or the smoke "
                "study, `python -m dlvirt plan --estimate` projects any config)")
    fixed = f"fixed repetitions {hours(totals['fixed_s'])}, " if totals["fixed_s"] is not None else ""
    adaptive = f"adaptive repetitions {hours(totals['adaptive_s'])}" if totals["adaptive_s"] is not None else \
        "nothing comparable measured"
    unknown = f", {totals['unknown_jobs']} of {totals['jobs']} job(s) unknown" if totals["unknown_jobs"] else ""
    return f"projected from {totals['records']} run record(s): {fixed}{adaptive}{unknown}"
