"""LLM: text generation with a decoder-only Llama-family model on llama.cpp, timed by token.

One LoadGen sample is one prompt (``llm_workload``). Its phases: pre-processing *tokenises* the
prompt with the model's own tokenizer (cut to the prompt's drawn input length), inference runs the
request's *prefill* (the prompt in batches, ending with the first output token, which is reported
to LoadGen at once: ``FirstTokenComplete``, so LoadGen measures time to first token) and its
*decode* steps (one greedy token each, exactly the drawn output length), post-processing
*detokenises* the output. The response LoadGen gets is the output's token ids (int32, with their
count), as MLPerf's LLM harnesses answer, so LoadGen reports tokens/s (Offline) and TTFT and time
per output token (SingleStream, Server). Prefill and decode are timed apart, each with its CPU
time (the process's: llama.cpp's threads are this process's).

The model (``llm_model``) is the GGUF that the weights rule writes (an architecture's shape with
seeded random weights, quantised, and a tokenizer trained on the dataset's text), or a configured
GGUF (``apps.llm.weights.path`` with ``sha256``: a published one, ``PUBLISHED``, which
``python -m dlvirt download --app llm`` fetches and checks). Every run record says which, with the
file's digest and architecture. The model-only tool (DLBS-style) times prefill and decode of random
token ids without the tokenizer.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from dlvirt.apps import llm_model, llm_workload
from dlvirt.apps.base import App, AppError, checked_weights, sha256_file, write_checksum
from dlvirt.apps.llm_engine import engine_class
from dlvirt.apps.squad import _lexicon
from dlvirt.core.atomic import write_text_atomic
from dlvirt.core.kinds import AppKind

DEFAULT_ENGINE = "llama.cpp"
# BPE needs about as many distinct words as merges: the pseudo-word lexicon's size per vocabulary token
LEXICON_PER_TOKEN = 1.5
# Ties SPM text to GGUF's tokenizer: LoadGen's token response is int32 ids
TOKEN_DTYPE = np.int32


class TextGeneration(App):
    kind = AppKind(name="llm", title="Text generation", model="SmolLM2-135M (Llama)", framework="llama.cpp",
                   dataset="prompts with MLPerf-LLM-shaped token lengths", order=5,
                   framework_packages=("llama-cpp-python",), packages=("gguf", "tokenizers"),
                   system_packages=("libgomp1",))  # llama.cpp's build threads with OpenMP (GNU libgomp)
    dataset_index = llm_workload.PROMPTS
    dataset_may_be_file = True
    weights_keys = ("seed", "architecture", "quantisation")
    token_latencies = True
    # tokenising is llama.cpp's own code on the calling thread, microseconds a prompt: where the stages
    # alternate it runs inline, and OpenMP keeps its own spin so llama.cpp's pool stays warm between tokens
    preprocess_on_framework_threads = True
    weights_file_names = ("model.gguf",)

    # -- dataset ------------------------------------------------------------------------------
    @classmethod
    def generate_dataset(cls, out_dir: Path, settings: dict[str, Any]) -> dict[str, Any]:
        dataset = settings["dataset"]
        return llm_workload.generate(out_dir / llm_workload.PROMPTS, int(dataset["count"]), int(dataset["seed"]),
                                     dataset["lengths"])

    @classmethod
    def check_real_dataset(cls, root: Path, settings: dict[str, Any]) -> dict[str, Any]:
        path = root if root.is_file() else root / llm_workload.PROMPTS
        prompts = llm_workload.read_prompts(path)
        return {"count": len(prompts), "format": "JSON lines", "file": str(path), "sha256": sha256_file(path)}

    @classmethod
    def download_dataset(cls, out_dir: Path) -> list[Path]:
        """LLM's download is its published model (the prompts stay synthetic or the user's own): the
        GGUF of ``llm_model.PUBLISHED``, checked against its SHA-256; point ``apps.llm.weights.path``
        (and ``sha256``) at it."""
        from dlvirt.apps.download import fetch_verified

        published = llm_model.PUBLISHED
        return [fetch_verified(published["url"], Path(out_dir) / published["file"], published["sha256"])]

    # -- the model file -----------------------------------------------------------------------
    @classmethod
    def weights_tag(cls, settings: dict[str, Any]) -> str:
        return (f"{settings.get('architecture', llm_model.DEFAULT_ARCHITECTURE)}-"
                f"{str(settings.get('quantisation', llm_model.DEFAULT_QUANTISATION)).lower()}-"
                f"{super().weights_tag(settings)}")

    @classmethod
    def weights_file_name(cls, settings: dict[str, Any]) -> str:
        return cls.weights_file_names[0]

    @classmethod
    def write_model(cls, settings: dict[str, Any], dataset_dir: Path, output: Path) -> dict[str, Any]:
        """The seeded random model as GGUF at ``output``: its tokenizer trained on the dataset's
        prompts and on pseudo-words of the dataset's generator."""
        arch = llm_model.architecture(settings.get("architecture", llm_model.DEFAULT_ARCHITECTURE))
        seed = int(settings.get("seed", 0))
        info_root = Path(dataset_dir)
        prompts_file = info_root / llm_workload.PROMPTS
        texts = [p.prompt for p in llm_workload.read_prompts(prompts_file)] if prompts_file.is_file() else []
        lexicon = _lexicon(np.random.default_rng(seed), int(LEXICON_PER_TOKEN * arch.vocab))
        vocabulary = llm_model.train_vocabulary(texts, lexicon, arch.vocab)
        return llm_model.write_gguf(output, arch, vocabulary, seed,
                                    settings.get("quantisation", llm_model.DEFAULT_QUANTISATION))

    @classmethod
    def build_weights(cls, settings: dict[str, Any], dataset_dir: Path, output: Path) -> str:
        if (settings.get("weights") or {}).get("path"):
            raise AppError("apps.llm.weights.path is set: launches load that GGUF, not a weights resource")
        cls.write_model(settings, dataset_dir, output)
        return write_checksum(output)

    def save_weights(self, path: Path) -> None:
        """The model file again: the seeded GGUF that ``write_model`` writes (the same bytes)."""
        self.write_model(self.settings, self.dataset_dir, path)

    # -- model and phases ---------------------------------------------------------------------
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        root = self.data_root
        path = root if root.is_file() else root / llm_workload.PROMPTS
        limit = self.settings["dataset"].get("count") if self.dataset_info["source"] == "real" else None
        self.prompts = llm_workload.read_prompts(path, limit)
        self.architecture = llm_model.architecture(self.settings.get("architecture", llm_model.DEFAULT_ARCHITECTURE))
        self.engine_name = str(self.settings.get("engine", DEFAULT_ENGINE))
        self.engine_cls = engine_class(self.engine_name)
        self.first_token = None  # the harness's LoadGen hook (App.token_latencies)
        self.model_facts: dict[str, Any] = {}
        self._scratch: Path | None = None  # where a launch without a weights resource writes its model
        self._clear_phases()

    def sample_count(self) -> int:
        return len(self.prompts)

    def import_framework(self) -> None:
        import llama_cpp  # noqa: F401

    def _model_file(self) -> tuple[Path, dict[str, Any]]:
        """The GGUF to load and what it is."""
        configured = checked_weights(self.settings)
        if configured is not None:
            self.weights_path = configured
            digest = self.settings["weights"].get("sha256") or sha256_file(configured)
            published = digest == llm_model.PUBLISHED["sha256"]
            return configured, {"weights": "loaded", "path": str(configured), "sha256": digest,
                                "published": llm_model.PUBLISHED["url"] if published else None}
        if self.cached_weights is not None:
            return self.cached_weights, {}
        self._scratch = Path(tempfile.mkdtemp(prefix="dlvirt-llm-"))
        path = self._scratch / self.weights_file_name(self.settings)
        self.model_facts = self.write_model(self.settings, self.dataset_dir, path)
        return path, {}

    def load_model(self) -> None:
        self.model_file, self.file_facts = self._model_file()
        self.gguf = llm_model.read_metadata(self.model_file)
        context = int(self.settings.get("context") or 0) or min(int(self.gguf.get("context") or 2048), 4096)
        threads = self.threads.intra_op
        try:
            self.engine = self.engine_cls(self.model_file, threads, self.processor, context,
                                          int(self.settings.get("seed", 0)))
        finally:
            if self._scratch is not None:  # llama.cpp has mapped it, or failed: the file goes either way
                shutil.rmtree(self._scratch, ignore_errors=True)
        longest = max((p.input_tokens or 0) + p.output_tokens for p in self.prompts)
        if longest > context:
            raise AppError(f"a prompt needs {longest} tokens of context, apps.llm.context gives {context}")
        self.context = context

    def first_call(self) -> None:
        """One short request: llama.cpp's buffers and thread pool are made before the first repetition."""
        self.engine.decode(self.engine.prefill(self.engine.tokenize("warm up")))

    # -- one repetition's phase clocks ----------------------------------------------------------
    def _clear_phases(self) -> None:
        self.clock = {"prefill_s": 0.0, "decode_s": 0.0, "prefill_cpu_s": 0.0, "decode_cpu_s": 0.0}
        self.counted = {"prompt_tokens": 0, "output_tokens": 0, "requests": 0}

    def infer_phases(self) -> dict[str, float]:
        """Prefill and decode, apart, with their CPU time (the harness adds them to the phases)."""
        return dict(self.clock)

    def preprocess(self, index: int) -> tuple[list[int], int]:
        """The prompt's tokens (cut to its input length) and the count of tokens to generate."""
        prompt = self.prompts[index]
        tokens = self.engine.tokenize(prompt.prompt)
        return (tokens[:prompt.input_tokens] if prompt.input_tokens else tokens), prompt.output_tokens

    def generate(self, position: int, tokens: list[int], count: int) -> list[int]:
        """Prefill ``tokens`` and decode until ``count`` tokens are out (the model does not stop
        earlier); the first is reported (``first_token``) as soon as prefill has made it."""
        start, cpu = time.perf_counter(), time.process_time()
        out = [self.engine.prefill(tokens)]
        prefilled, prefill_cpu = time.perf_counter(), time.process_time()
        if self.first_token is not None:
            self.first_token(position, out[0])
        decode_start, decode_cpu = time.perf_counter(), time.process_time()
        while len(out) < count:
            out.append(self.engine.decode(out[-1]))
        self.clock["prefill_s"] += prefilled - start
        self.clock["prefill_cpu_s"] += prefill_cpu - cpu
        self.clock["decode_s"] += time.perf_counter() - decode_start
        self.clock["decode_cpu_s"] += time.process_time() - decode_cpu
        self.counted["prompt_tokens"] += len(tokens)
        self.counted["output_tokens"] += len(out)
        self.counted["requests"] += 1
        return out

    def infer(self, batch: list[tuple[list[int], int]]) -> list[list[int]]:
        """The batch's requests one after another (llama.cpp's batch is a prompt's tokens)."""
        return [self.generate(k, tokens, count) for k, (tokens, count) in enumerate(batch)]

    def synthetic_batch(self, batch_size: int) -> list[tuple[list[int], int]]:
        """Model-only requests: random token ids of the median prompt length (no tokenizer), each
        decoding the median output length."""
        rng = np.random.default_rng(0)
        length = int(np.median([p.input_tokens or 16 for p in self.prompts]))
        count = int(np.median([p.output_tokens for p in self.prompts]))
        vocab = int(self.gguf.get("vocab") or self.architecture.vocab)
        first = len(llm_model.SPECIAL) + len(llm_model.BYTE_TOKENS)
        return [([llm_model.BOS, *rng.integers(first, vocab, size=max(length - 1, 1)).tolist()], count)
                for _ in range(batch_size)]

    def begin_repetition(self, out_dir: Path) -> None:
        super().begin_repetition(out_dir)
        self._clear_phases()
        self.outputs: dict[str, str] = {}

    def postprocess(self, indices: list[int], outputs: list[list[int]]) -> list[bytes]:
        answers = []
        for index, tokens in zip(indices, outputs, strict=True):
            self.outputs[self.prompts[index].id] = self.engine.detokenize(tokens)
            answers.append(np.asarray(tokens, dtype=TOKEN_DTYPE).tobytes())
        return answers

    def end_repetition(self) -> dict[str, Any]:
        if self.outputs:
            write_text_atomic(self.out_dir / "outputs.jsonl", "".join(
                f'{{"id": "{k}", "chars": {len(v)}}}\n' for k, v in self.outputs.items()))
        decode_tokens = self.counted["output_tokens"] - self.counted["requests"]
        return {**self.counted,
                "prefill_tokens_per_s": self.counted["prompt_tokens"] / self.clock["prefill_s"]
                if self.clock["prefill_s"] else None,
                "decode_tokens_per_s": decode_tokens / self.clock["decode_s"] if self.clock["decode_s"] else None,
                "note": "random weights: the text is meaningless, its length is the workload"}

    def model_provenance(self) -> dict[str, Any]:
        provenance = super().model_provenance()
        provenance.update(self.file_facts)
        provenance.update({"model": self.gguf.get("general.name") or self.architecture.title,
                           "architecture": self.architecture.to_dict(), "gguf": self.gguf,
                           "engine": self.engine_name, "offload": self.engine.offload(),
                           "context": self.context, "mlperf_reference_size": not self.architecture.stand_in})
        if self.architecture.stand_in:
            provenance["note"] = (f"NOT {self.kind.model}: apps.llm.architecture is {self.architecture.name}, "
                                  "a test shape")
        if self.model_facts:
            provenance["written"] = self.model_facts
        elif self.weights_path is None:
            provenance["note"] = ("random weights of the architecture's shape, written by dlvirt "
                                  "(apps.llm.weights.path: a published GGUF instead)")
        return provenance

    def gpu_state(self) -> dict[str, Any]:
        offload = self.engine.offload()
        return {"framework": self.engine_name, "framework_gpus": offload.get("devices", []),
                "weights_device": "cuda" if offload["gpu_layers"] else "cpu"}

    def framework_threads(self) -> dict[str, Any]:
        threads = self.engine.threads()
        return {"intra_op": threads["n_threads"], "inter_op": 1, **threads}

    def framework_versions(self) -> dict[str, str]:
        return self.engine.versions()
