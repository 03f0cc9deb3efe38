"""The summary's columns, declared once: name, type and meaning.

``aggregate`` writes ``results/summary/<tool>/<app>.csv`` with ``SUMMARY``'s columns in this order;
``results/summary.csv`` (every per-app summary concatenated) adds ``MODEL``'s. ``read_summary``
reads either through the same declaration: list columns (``;``-joined per launch) and text columns
stay text, and a column the declaration does not know is refused naming the file. ``markdown()``
prints the table that docs/summary-columns.md holds (a test keeps the two equal).

Adding a column: declare it here, compute it in ``aggregate.summarise_launches`` (or ``model``), and
regenerate the docs table (``python -m dlvirt.analysis.columns > docs/summary-columns.md``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import pandas as pd

from dlvirt.core import formats
from dlvirt.core.machinetime import LAUNCH_PARTS

# str: text; int / float: numbers (float NaN where not recorded); bool: True/False (empty where the
# row has no such verdict); list: one value per launch, joined by ";" (text in the CSV)
ColumnType = Literal["str", "int", "float", "bool", "list"]


@dataclass(frozen=True)
class Column:
    name: str
    type: ColumnType
    meaning: str


class SummaryError(ValueError):
    """A summary CSV that dlvirt does not know how to read; the message names the file."""


_LAUNCH_PART_MEANING = {
    "startup_s": "start-up: weights check, provisioning, boot, imports",
    "model_load_s": "loading the model",
    "warmup_s": "the warm-up repetitions and the framework's first call",
    "counted_s": "the counted repetitions",
    "other_s": "the rest: results, teardown",
}

# the columns that name a row: one row per tool x app x scenario x site (x VMM)
KEY: tuple[Column, ...] = (
    Column("tool", "str", "run tool: one of study.tools (E2E through LoadGen Offline, or model-only); the LoadGen "
           "tool in SingleStream or Server adds -SingleStream / -Server (per-query latency)"),
    Column("app", "str", "DL application, one of study.apps"),
    Column("platform", "str", "execution platform, one of the matrix's platforms"),
    Column("cores", "int", "CPU cores the scenario grants"),
    Column("pinning", "str", "VNL (vanilla: any cores) or PIN (pinned to cores)"),
    Column("processor", "str", "CPU or GPU"),
    Column("site", "str", "the host that measured the row: local (the main host) or an edge site's name"),
)

SUMMARY: tuple[Column, ...] = KEY + (
    Column("scenario", "str", "the scenario's name (platform-cores-pinning-processor)"),
    Column("vmm", "str", "the VMM of a microVM row (QEMU microvm or Firecracker); empty otherwise"),
    Column("replicates", "int", "launches (replicates) of the scenario"),
    Column("reps", "int", "counted repetitions over every launch (LoadGen-INVALID ones left out)"),
    Column("min_reps", "int", "the fewest counted repetitions of any launch"),
    Column("outliers", "int", "repetitions flagged by the modified z-score rule within their launch (kept)"),
    Column("outlier_reps", "str", "the flagged repetitions per launch: 'round 2: rep 3; round 5: rep 1, 4'"),
    Column("outlier_launches", "str", "launches whose mean the modified z-score rule flags among the row's "
                                      "launch means (three or more; kept): 'round 2; round 5'"),
    Column("unsteady_launches", "int", "launches whose first two counted repetitions differ by more than "
                                       "study.warmup_tolerance (reported; every repetition still counts)"),
    Column("mean_s", "float", "mean of the launch means (s): the row's E2E or model-only time"),
    Column("ci95_s", "float", "95 % Student-t half-width over the launch means (s); NaN with one launch"),
    Column("ci_n", "int", "launches the interval is over"),
    Column("std_s", "float", "SD of the launch means (s); with one launch, the SD within it"),
    Column("within_sd_s", "float", "variance component within launches, as an SD in seconds"),
    Column("between_sd_s", "float", "variance component between launches, as an SD in seconds"),
    Column("round_means_s", "list", "each launch's mean (s), in the order of launch_rounds"),
    Column("round_medians_s", "list", "each launch's median (s), in the order of launch_rounds"),
    Column("launch_rounds", "list", "the round (replicate) of each launch"),
    Column("launch_nodes", "list", "the node (host name) each launch ran on"),
    Column("launch_boot_s", "list", "each launch's platform boot time (s), for platforms that boot"),
    Column("round_pre_s", "list", "each launch's mean pre-processing busy time (s), in the order of launch_rounds; "
           "empty for model-only rows"),
    Column("round_infer_s", "list", "each launch's mean inference busy time (s), in the order of launch_rounds"),
    Column("drift_p", "float", "p-value of a trend in the launch means over the rounds"),
    Column("median_s", "float", "median of every counted repetition (s)"),
    Column("iqr_s", "float", "interquartile range of every counted repetition (s)"),
    Column("invalid", "int", "repetitions LoadGen marked INVALID (left out of every statistic; SingleStream, "
           "Server: those not issued as asked)"),
    Column("pre_s", "float", "mean pre-processing busy time per repetition (s); NaN for model-only rows"),
    Column("infer_s", "float", "mean inference busy time per repetition (s)"),
    Column("post_s", "float", "mean post-processing busy time per repetition (s); NaN for model-only rows"),
    Column("pre_cpu_s", "float", "mean CPU time of pre-processing per repetition (s)"),
    Column("infer_cpu_s", "float", "mean CPU time of inference per repetition (s)"),
    Column("post_cpu_s", "float", "mean CPU time of post-processing per repetition (s)"),
    Column("stall_s", "float", "mean time inference waited for pre-processed samples per repetition (s)"),
    Column("throttled_pct", "float",
           "CFS periods throttled per 100 periods (NaN without a quota; 0 when no period ended)"),
    Column("throttled_s", "float", "mean CFS throttled time per repetition (s)"),
    Column("steal_pct", "float", "mean steal time, % of the repetition (inside a guest)"),
    Column("others_on_cpus_cores", "float",
           "mean cores that processes other than the launch's and its platform's took on the launch's own host CPUs "
           "during a counted repetition, read from the host (docs/measurement.md, Interference); NaN in older results"),
    Column("platform_on_cpus_cores", "float",
           "mean cores the platform's own processes (dlvirt, the engines, a VMM's non-vCPU threads, kernel threads) "
           "took on the launch's host CPUs during a counted repetition; never interference; NaN in older results"),
    Column("disturbed_share", "float",
           "share of the counted repetitions disturbed: others took more than study.interference.disturbed_above "
           "of their cores' time on their CPUs (those the rerun rule left in, marked); NaN where not judged "
           "(older results)"),
    Column("reruns", "int", "launch attempts the rerun rule (study.interference) discarded and ran again"),
    Column("ctx_switches", "float", "mean voluntary + involuntary context switches per repetition"),
    Column("major_faults", "float",
           "mean major page faults per repetition (pages read from disk, e.g. weights a memory limit evicted; "
           "NaN in older results)"),
    Column("samples", "int", "samples per repetition"),
    Column("samples_per_s", "float", "mean throughput (samples/s)"),
    Column("loadgen_valid", "bool", "every repetition LoadGen-VALID (empty for model-only rows)"),
    Column("accel", "str", "a guest's acceleration: kvm, tcg (emulated), or none"),
    Column("boot_s", "float", "mean platform boot time (s), for platforms that boot a guest"),
    Column("threads_policy", "str", "thread policy: granted or framework-default"),
    Column("threads", "int", "intra-op threads the framework reported using"),
    Column("pipeline", "str", "how the LoadGen pipeline ran: overlapped or sequential (empty: model-only)"),
    Column("dataset_source", "str", "where the dataset came from (the real dataset or a stand-in)"),
    Column("model", "str", "the model's name"),
    Column("reference_model", "bool", "the MLPerf reference-size model (False: a smaller stand-in)"),
    Column("weights", "str", "the weights' kind (pretrained, trained here, random)"),
    Column("execution", "str", "how the model ran (the run record's model.optimisation, e.g. frozen-graph, "
           "torchscript-frozen, inference_mode), with the padding of an app that records one: a different "
           "way is a different workload"),
    Column("host", "str", "host name of the measuring host"),
    Column("hardware", "str", "the hardware of the launches (several kinds joined by ' + ')"),
    Column("gpu", "str", "the GPU model of a GPU row"),
    Column("gpu_util_pct", "float", "mean sampled GPU utilisation (%); a repetition shorter than the driver's "
           "sample period that read 0 % throughout counts its first non-zero reading after it"),
    Column("gpu_mem_mib", "float", "the process's peak GPU memory (MiB)"),
    Column("sockets", "int", "the most sockets a PIN launch's cores spanned"),
    Column("numa_nodes", "int", "the most NUMA nodes a PIN launch's cores spanned"),
    Column("memory_mib", "int", "study.memory as the platform applied and verified it (MiB)"),
    Column("max_rss_mib", "float", "the harness's peak resident memory in any repetition (MiB)"),
    Column("code_version", "str", "the dlvirt code that measured the row ('mixed: ...' if allowed to differ)"),
    Column("host_virtualization", "str", "for a non-virtualised platform: what its host itself is (none: bare metal)"),
    *(Column(f"launch_{part}", "float", f"mean per launch (s): {meaning}")
      for part, meaning in _LAUNCH_PART_MEANING.items()),
    Column("launch_total_s", "float", "mean machine time per launch (s)"),
    Column("counted_share", "float", "the share of a launch's machine time spent in counted repetitions"),
    # SingleStream and Server rows (run tools mlperf-<Scenario>, dlvirt.core.loadgen); empty for Offline and DLBS
    *(Column(f"{name.replace('.', '')}_s", "float", f"LoadGen's {name} query latency (s): the mean over launches "
             "of each launch's mean (SingleStream, Server)") for name in ("p50", "p90", "p95", "p99", "p99.9")),
    Column("round_p50_s", "list", "each launch's mean p50 latency (s), in the order of launch_rounds"),
    Column("round_p99_s", "list", "each launch's mean p99 latency (s), in the order of launch_rounds"),
    Column("latency_queries", "int", "the fewest queries of any counted repetition (SingleStream, Server): "
           "below 100 a repetition's p99 is its largest latency or next to it"),
    Column("achieved_qps", "float", "the query rate LoadGen measured (queries/s; SingleStream, Server)"),
    Column("target_qps", "float", "Server's target rate (queries/s): configured or a share of the Offline throughput"),
    Column("early_stopping_met", "bool", "LoadGen's early-stopping verdict met in every repetition (SingleStream, "
           "Server; not met makes LoadGen's verdict INVALID, the repetitions still count)"),
    Column("loadgen_scenario", "str", "the LoadGen scenario of a latency row: SingleStream or Server"),
    # token apps (LLM; dlvirt.apps.llm): empty for the others
    Column("ttft_s", "float", "time to first token (s): prefill per request as the app times it, the mean over "
           "launches of each launch's mean (every scenario; Offline serves requests one after another)"),
    Column("tpot_s", "float", "time per output token (s) after the first: decode per token as the app times it, "
           "the mean over launches of each launch's mean"),
    Column("round_ttft_s", "list", "each launch's mean time to first token (s), in the order of launch_rounds"),
    Column("round_tpot_s", "list", "each launch's mean time per output token (s), in the order of launch_rounds"),
    Column("tokens_per_s", "float", "LoadGen's output tokens per second (Offline: of the whole workload; "
           "SingleStream, Server: completed)"),
    *(Column(f"{what}_{name}_s", "float", f"LoadGen's {name} {title} (s), mean over repetitions (SingleStream, "
             "Server)") for what, title in (("ttft", "time to first token"), ("tpot", "time per output token"))
      for name in ("p50", "p90", "p99")),
    Column("slowed", "str", "set only where a platform was deliberately slowed (slowdown_cpu_quota, to show "
           "dlvirt compare a real slow-down): not a normal study's row; empty otherwise"),
    Column(formats.KEY, "int", "the summary format's version (dlvirt.core.formats): readers refuse another"),
)

# added to results/summary.csv by the study's launch-level model (dlvirt.analysis.model)
MODEL: tuple[Column, ...] = (
    Column("model_mean_s", "float", "the row's cell of the study's model: a geometric mean adjusted for rounds (s)"),
    Column("model_low_s", "float", "lower bound of the model's 95 % interval (s)"),
    Column("model_high_s", "float", "upper bound of the model's 95 % interval (s)"),
    Column("model_df", "float", "the model's residual degrees of freedom"),
)

KEY_COLUMNS = [c.name for c in KEY]
COLUMNS = [c.name for c in SUMMARY]
MODEL_COLUMNS = [c.name for c in MODEL]
BY_NAME = {c.name: c for c in (*SUMMARY, *MODEL)}
assert tuple(_LAUNCH_PART_MEANING) == LAUNCH_PARTS, "every launch part needs its meaning"


def read_summary(path: str | Path) -> pd.DataFrame:
    """A summary CSV (per app or the study's): text and list columns as text; empty or absent file: no
    rows. A column the declaration does not know is refused, naming the file."""
    path = Path(path)
    if not path.exists() or path.stat().st_size == 0:
        return pd.DataFrame()
    header = pd.read_csv(path, nrows=0).columns
    unknown = [name for name in header if name not in BY_NAME]
    if unknown:
        raise SummaryError(f"{path}: unknown summary column(s) {', '.join(unknown)}: not a summary this "
                           "dlvirt writes (see docs/summary-columns.md)")
    text = {name: str for name in header if BY_NAME[name].type in ("str", "list", "bool")}
    frame = pd.read_csv(path, dtype=text)
    for name in header:
        if BY_NAME[name].type == "bool":
            try:
                frame[name] = frame[name].map(_truth, na_action="ignore")
            except SummaryError as error:
                raise SummaryError(f"{path}: column {name}: {error}") from None
    if formats.KEY in frame:  # a summary without the column was written before versions were
        formats.check_column("summary", frame[formats.KEY].dropna(), str(path))
    return frame


_TRUTH = {"true": True, "1": True, "1.0": True, "false": False, "0": False, "0.0": False}


def _truth(cell: str) -> bool:
    """A bool cell as written: True/False, or 1.0/0.0 where pandas wrote a column that other rows
    (Offline or model-only) left empty as numbers; anything else is not a summary dlvirt writes."""
    try:
        return _TRUTH[cell.strip().lower()]
    except KeyError:
        raise SummaryError(f"not a true/false value: {cell!r}") from None


def read_table(path: str | Path, document: formats.Document) -> pd.DataFrame:
    """Another CSV dlvirt writes (claims, tables) once its ``format_version`` column is checked, without it."""
    frame = pd.read_csv(path)
    if formats.KEY not in frame:
        formats.check(document, None, str(path))
        return frame
    formats.check_column(document, frame[formats.KEY].dropna(), str(path))
    return frame.drop(columns=formats.KEY)


def markdown() -> str:
    """The columns as docs/summary-columns.md prints them."""
    lines = ["# Summary columns", "",
             "`results/summary/<tool>/<app>.csv` has these columns, in this order; `results/summary.csv`",
             "(every per-app summary) adds the model's at the end. Declared in `src/dlvirt/analysis/columns.py`;",
             "generated by `python -m dlvirt.analysis.columns` (a test keeps this file equal to it).",
             "Types: `list` is one value per launch joined by `;`; an empty cell is not recorded.", "",
             "| column | type | meaning |", "|---|---|---|"]
    lines += [f"| `{c.name}` | {c.type} | {c.meaning} |" for c in SUMMARY]
    lines += ["", "Added to `results/summary.csv` by the study's model:", "",
              "| column | type | meaning |", "|---|---|---|"]
    lines += [f"| `{c.name}` | {c.type} | {c.meaning} |" for c in MODEL]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(markdown(), end="")
