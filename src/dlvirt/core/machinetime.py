"""Machine time: what a launch cost as measured, and how a projected total reads (``plan.estimate``
projects; the plan's log and the report print)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from dlvirt.core.records import JobResult, Repetition

# The parts of a launch's machine time (JobResult.launch_s), in the order a launch spends them; they
# add up to its total_s.
LAUNCH_PARTS = ("startup_s", "model_load_s", "warmup_s", "counted_s", "other_s")


def launch_overhead_s(record: JobResult) -> float:
    """What one launch costs beside its repetitions: its start-up (weights check, provisioning, boot,
    imports), model load and the rest (results, teardown); older results: the platform's start-up
    to the harness where recorded (CN's ``start_to_harness_s``), boot and model load."""
    if record.launch_s is not None:
        return sum(record.launch_s[part] for part in LAUNCH_PARTS if part not in ("warmup_s", "counted_s"))
    start = float(record.platform.get("start_to_harness_s") or 0)
    return start + record.model_load_s + float(record.platform.get("boot_s") or 0)


def repetition_s(rep: Repetition) -> float:
    """One repetition's wall time from start to finish (E2E and what LoadGen does around it)."""
    return (datetime.fromisoformat(rep.finished_utc) - datetime.fromisoformat(rep.started_utc)).total_seconds()


def launch_machine_s(record: JobResult) -> float:
    """What one launch cost, as measured: its total (``launch_s``); for older results its warm-ups and
    repetitions from start to finish, plus its model load and boot."""
    if record.launch_s is not None:
        return record.launch_s["total_s"] + rerun_s(record)
    return launch_overhead_s(record) + sum(repetition_s(r) for r in [*record.warmups, *record.runs])


def rerun_s(record: JobResult) -> float:
    """The machine time of the attempts the rerun rule replaced (``JobResult.interference``; 0: none)."""
    account = record.interference
    if not account:
        return 0.0
    return float(sum(a["total_s"] for a in account["attempts"] if a["attempt"] != account["kept"]))


def launch_cost_s(record: JobResult) -> float:
    """What a launch costs before its first counted repetition (Kalibera & Jones's c_launch): its
    start-up, model load and warm-ups (``launch_s``); for older results the platform's start-up to
    the harness (where recorded: CN's ``start_to_harness_s``), boot, model load and the warm-ups."""
    if record.launch_s is not None:
        return sum(record.launch_s[part] for part in ("startup_s", "model_load_s", "warmup_s"))
    return launch_overhead_s(record) + sum(repetition_s(r) for r in record.warmups)


def split_totals(records: list[JobResult]) -> dict[str, float] | None:
    """The machine time of the launches that split it (``launch_s``), per part and in total (None: none does)."""
    split = [r.launch_s for r in records if r.launch_s is not None]
    if not split:
        return None
    return {part: sum(s[part] for s in split) for part in (*LAUNCH_PARTS, "total_s")} | {"launches": len(split)}


def split_line(split: dict[str, float] | None) -> str:
    """The split as shares of the launches' total, for the report."""
    if split is None or split["total_s"] <= 0:
        return "not recorded (results written before launches were split)"
    names = {"counted_s": "counted repetitions", "warmup_s": "warm-ups", "model_load_s": "model loads",
             "startup_s": "start-up (weights check, provisioning, process, container or boot, imports)",
             "other_s": "the rest (results, teardown)"}
    shares = ", ".join(f"{split[part] / split['total_s']:.0%} {names[part]}"
                       for part in ("counted_s", "warmup_s", "model_load_s", "startup_s", "other_s"))
    return f"{hours(split['total_s'])} over {int(split['launches'])} launch(es): {shares}"


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
