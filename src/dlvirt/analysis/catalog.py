"""The study's figures: which summaries each one reads, its notebook, and how the report reads it.

One list, used by the workflow (which summaries a figure's rule needs), the notebooks' rules and
the report. Free of heavy imports: the Snakefile loads it while building the DAG.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from dlvirt.core.loadgen import run_tool

# the tools whose rows the figures draw (dlvirt.run.tools): the paper's E2E measurement, and model-only
E2E_TOOL, MODEL_ONLY_TOOL = "mlperf", "dlbs"


@dataclass(frozen=True)
class FigureSpec:
    id: str
    title: str
    tool: str                        # E2E_TOOL or MODEL_ONLY_TOOL
    apps: tuple[str, ...]            # the per-app summaries it reads
    shows: str                       # what is plotted, for the report
    paper: str                       # what the paper reports in this figure
    claims: tuple[str, ...] = ()     # ids in dlvirt.analysis.claims this figure bears on
    notebook: str = ""               # notebooks/<notebook>.ipynb; defaults to the id
    parameters: dict[str, Any] = field(default_factory=dict)  # extra papermill parameters
    processors: tuple[str, ...] = ("CPU", "GPU")  # which rows the report's reading counts
    edge: bool = False               # drawn from rows measured on an edge host

    @property
    def notebook_name(self) -> str:
        return self.notebook or self.id


def _e2e(id: str, title: str, tool: str, apps: tuple[str, ...], shows: str, paper: str,
         claims: tuple[str, ...] = (), *, processors: tuple[str, ...] = ("CPU", "GPU"),
         ylabel: str = "E2E inference time (s)") -> FigureSpec:
    """A figure of inference time against the scale-up level, one panel per processor: all drawn by
    notebooks/e2e_vs_cores.ipynb with these parameters."""
    (app,) = apps
    return FigureSpec(id, title, tool, apps, shows, paper, claims, notebook="e2e_vs_cores", processors=processors,
                      parameters={"tool": tool, "app": app, "processors": list(processors), "title": title,
                                  "ylabel": ylabel})


_E2E = ("One line per platform and CPU mode (solid: vanilla, dashed: pinned) against the scale-up level; "
        "error bars are 95 % confidence intervals; hollow markers are emulated (TCG) guests.")

FIGURES: tuple[FigureSpec, ...] = (
    _e2e("fig4a", "Fig. 4a: IC E2E inference time (CPU)", E2E_TOOL, ("ic",), _E2E,
         "Pinned platforms are fastest; vanilla CN carries an outlier overhead at small core counts; "
         "from 32 cores on, BM is slower than the virtualised platforms.",
         ("pinning", "cn_overhead_chr", "scale_up_limit"), processors=("CPU",)),
    _e2e("fig4b", "Fig. 4b: IC E2E inference time (GPU)", E2E_TOOL, ("ic",), _E2E,
         "With a GPU, pre- and post-processing on the CPU dominate; scale-up beyond 32 cores slows IC down.",
         ("gpu_speedup", "scale_up_limit"), processors=("GPU",)),
    _e2e("fig5", "Fig. 5: IC model-only inference time (DLBS)", MODEL_ONLY_TOOL, ("ic",),
         "DLBS-style model-only time (synthetic tensors, no pre/post-processing) per platform and "
         "CPU mode against the scale-up level, CPU and GPU panels, 95 % CI.",
         "Without pre- and post-processing the differences between platforms shrink: the model alone "
         "hides much of the overhead that the E2E time shows.", ylabel="model-only inference time (s)"),
    _e2e("fig6", "Fig. 6: SR E2E inference time (CPU)", E2E_TOOL, ("sr",), _E2E,
         "Platforms follow one trend up to 32 cores (except vanilla CN); 64-core VM-based instances "
         "span two sockets and slow down sharply; E2E time falls up to 8 cores only.",
         ("pinning", "scale_up_limit"), processors=("CPU",)),
    _e2e("fig7a", "Fig. 7a: NLP E2E inference time (CPU)", E2E_TOOL, ("nlp",), _E2E,
         "16 cores give the lowest E2E time on every platform but vanilla CN; pinned platforms beat "
         "vanilla ones.", ("pinning", "scale_up_limit"), processors=("CPU",)),
    _e2e("fig7b", "Fig. 7b: NLP E2E inference time (GPU)", E2E_TOOL, ("nlp",), _E2E,
         "The GPU speeds NLP up more than 3× on every platform; scale-up and pinning matter little.",
         ("gpu_speedup",), processors=("GPU",)),
    _e2e("fig8a", "Fig. 8a: RS E2E inference time (CPU)", E2E_TOOL, ("rs",), _E2E,
         "Outlier overhead of vanilla CN, no gain from scaling up to 64 cores, pinning helps.",
         ("pinning", "cn_overhead_chr", "scale_up_limit"), processors=("CPU",)),
    _e2e("fig8b", "Fig. 8b: RS E2E inference time (GPU)", E2E_TOOL, ("rs",), _E2E,
         "The GPU barely improves RS: pre- and post-processing on the CPU dominate.",
         ("gpu_speedup",), processors=("GPU",)),
    FigureSpec("fig9", "Fig. 9: no idle host cores (IC, CPU)", E2E_TOOL, ("ic",),
               "E2E time of instances as large as the host (instance cores = host cores) for BM, CN, VM and "
               "VMCN, vanilla and pinned, 95 % CI.",
               "Without idle host cores the overhead of the virtualised platforms, vanilla VM and VMCN in "
               "particular, is well above BM.", ("no_idle_cores",), processors=("CPU",),
               parameters={"app": "ic", "platforms": ["BM", "CN", "VM", "VMCN"]}),
    FigureSpec("fig10", "Fig. 10: MVM against the other platforms", E2E_TOOL, ("ic", "sr", "nlp", "rs"),
               "E2E time per app at the largest MVM level (vanilla, CPU), normalised per app to BM, next to "
               "the platforms' boot times.",
               "MVM and VM perform alike except for I/O-heavy NLP, where MVM is slower; MVM boots much faster.",
               ("mvm_like_vm",), processors=("CPU",), parameters={"platform": "MVM"}),
    FigureSpec("fig11", "Fig. 11: the edge (IC and SR)", E2E_TOOL, ("ic", "sr"),
               "E2E time per platform on the edge host, normalised per app to BM.",
               "On the edge (all of the device's cores, CHR = 1) CN adds the least overhead; VMCN the most.",
               ("cn_cheapest_chr1",), edge=True, parameters={"apps": ["ic", "sr"]}),
    *(FigureSpec(f"phases_{app}", f"Phase breakdown: {app.upper()}", E2E_TOOL, (app,),
                 "Share of pre-processing, inference and post-processing in the time spent in the phases, "
                 "per scenario, with the mean E2E time beside each bar.",
                 paper, notebook="phases", parameters={"app": app})
      for app, paper in (
          ("ic", "IC is pre/post-heavy: image decoding and resizing rival inference on the CPU and dominate on a GPU."),
          ("sr", "The paper gives no breakdown for SR; its workload is 15-second WAV files through an RNN-T."),
          ("nlp", "NLP is inference-heavy: BERT dominates pre- and post-processing."),
          ("rs", "RS is pre/post-heavy: parsing Criteo lines dominates the small DLRM model."))),
)

# Extension beyond the paper: what the sandboxed container (SCN, gVisor) costs per phase, beside CN.
SANDBOX_FIGURE = FigureSpec(
    "sandbox", "Extension: what the sandbox costs per phase (SCN over CN)", E2E_TOOL, ("ic", "sr", "nlp", "rs"),
    "Per app and scenario (CPU), SCN's mean pre-processing and inference busy time and E2E time over CN's at the "
    "same cores and CPU mode.",
    "Not in the paper; gVisor's user-space kernel serves every system call, which pre-processing (file reads, "
    "decoding, allocation) makes many of and inference on tensors in memory few.",
    ("sandbox_pre_not_infer",), processors=("CPU",), parameters={"sandbox": "SCN", "beside": "CN"})
FIGURES = (*FIGURES, SANDBOX_FIGURE)

# Extensions beyond the paper (not among its figures): tail latency under LoadGen's SingleStream and
# Server scenarios (study.scenarios); built only where the study runs that scenario.
LATENCY_FIGURES: tuple[FigureSpec, ...] = tuple(
    FigureSpec(f"latency_{scenario.lower()}", f"Extension: tail latency, LoadGen {scenario}",
               run_tool(E2E_TOOL, scenario),
               ("ic", "sr", "nlp", "rs"),
               f"Per app, p50 and p99 query latency under LoadGen {scenario} of each scenario, normalised to BM at "
               "the same cores, CPU mode and processor (95 % CI over the launches), with the milliseconds and the "
               "CFS throttled share beside each pair.",
               "Not in the paper (it measures Offline E2E only); its mechanism, CFS throttling of vanilla "
               "containers, predicts that a quota raises the tail (p99) more than the median (p50).",
               ("latency_tail_quota",), notebook="latency",
               parameters={"tool": run_tool(E2E_TOOL, scenario)})
    for scenario in ("SingleStream", "Server"))
# Extension: a token app's (LLM's) time to first token and per output token, per platform and against cores
TOKEN_FIGURES: tuple[FigureSpec, ...] = (
    FigureSpec("tokens_llm", "Extension: LLM time to first token and per output token", E2E_TOOL, ("llm",),
               "Each scenario's time to first token (prefill) and per output token (decode), normalised to BM at "
               "the same cores, CPU mode and processor, and both against the scale-up level per platform.",
               "Not in the paper (it predates LLM serving); decode is memory-bound, so platforms that cost memory "
               "accesses (nested paging in guests) should slow TPOT more than TTFT.",
               ("llm_decode_cost",), notebook="tokens", parameters={"app": "llm", "tool": E2E_TOOL}),
)
FIGURES = FIGURES + LATENCY_FIGURES + TOKEN_FIGURES

BY_ID = {spec.id: spec for spec in FIGURES}
