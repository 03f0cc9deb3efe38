"""LLM's inference engines behind one interface (``apps.llm.engine`` picks one).

An engine loads a GGUF model, tokenises and detokenises with the model's own tokenizer, and runs a
request's prefill (the prompt's tokens in batches; the first output token) and its decode steps
(one token each, greedy: the logits' argmax, so every platform generates the same tokens). The app
times the phases and reports the first token to LoadGen between them.

``llama.cpp``: llama.cpp through ``llama-cpp-python`` (the lock's version, built by ./setup.sh from
its pinned source: its vendored llama.cpp). On a GPU it offloads every layer
(``n_gpu_layers=-1``); that needs a build with a GPU backend (setup.sh's GPU stack builds with
``GGML_CUDA``), and a CPU-only build refuses a GPU job rather than run it on the CPU. A GPU engine
of its own (vLLM) would be one more class here with the same methods.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

import numpy as np

from dlvirt.apps.base import AppError


class Engine(Protocol):
    name: str

    def __init__(self, model: Path, threads: int | None, processor: str, context: int, seed: int) -> None: ...
    def tokenize(self, text: str) -> list[int]: ...
    def detokenize(self, tokens: list[int]) -> str: ...
    def prefill(self, tokens: list[int]) -> int: ...   # a new request's prompt; its first output token
    def decode(self, token: int) -> int: ...           # the token just generated in; the next one out
    def threads(self) -> dict[str, Any]: ...
    def versions(self) -> dict[str, str]: ...
    def offload(self) -> dict[str, Any]: ...


class LlamaCpp:
    name = "llama.cpp"

    def __init__(self, model: Path, threads: int | None, processor: str, context: int, seed: int) -> None:
        import llama_cpp

        self.lib = llama_cpp
        self.gpu = processor == "GPU"
        if self.gpu and not llama_cpp.llama_supports_gpu_offload():
            raise AppError("this llama-cpp-python build has no GPU backend: a GPU job needs the GPU stack's "
                           "build (./setup.sh on a machine whose nvidia-smi lists a GPU)")
        kwargs: dict[str, Any] = {"model_path": str(model), "n_ctx": context, "n_batch": min(context, 512),
                                  "n_gpu_layers": -1 if self.gpu else 0, "seed": seed, "verbose": False}
        if threads is not None:  # else llama-cpp-python's own defaults (cores / 2 and cores)
            kwargs.update(n_threads=threads, n_threads_batch=threads)
        try:
            self.llm = llama_cpp.Llama(**kwargs)
        except ValueError as err:
            raise AppError(f"llama.cpp cannot load {model}: {err}") from err
        self.context = context

    def tokenize(self, text: str) -> list[int]:
        return list(self.llm.tokenize(text.encode("utf-8"), add_bos=True, special=False))

    def detokenize(self, tokens: list[int]) -> str:
        return bytes(self.llm.detokenize(tokens)).decode("utf-8", errors="replace")

    def _next(self) -> int:
        return int(np.argmax(self.llm.scores[self.llm.n_tokens - 1]))

    def prefill(self, tokens: list[int]) -> int:
        self.llm.reset()  # a new request: its own KV cache from position 0
        self.llm.eval(tokens)
        return self._next()

    def decode(self, token: int) -> int:
        if self.llm.n_tokens >= self.context:
            raise AppError(f"the request outgrew the context of {self.context} tokens (apps.llm.context)")
        self.llm.eval([token])
        return self._next()

    def threads(self) -> dict[str, Any]:
        ctx = self.llm.ctx
        return {"n_threads": int(self.lib.llama_n_threads(ctx)),
                "n_threads_batch": int(self.lib.llama_n_threads_batch(ctx))}

    def versions(self) -> dict[str, str]:
        return {"llama-cpp-python": str(self.lib.__version__),
                "llama.cpp system": self.lib.llama_print_system_info().decode(errors="replace").strip()}

    def offload(self) -> dict[str, Any]:
        return {"gpu_layers": -1 if self.gpu else 0,
                "supports_gpu_offload": bool(self.lib.llama_supports_gpu_offload())}


ENGINES: dict[str, type[Engine]] = {LlamaCpp.name: LlamaCpp}


def engine_class(name: str) -> type[Engine]:
    if name not in ENGINES:
        raise AppError(f"apps.llm.engine {name!r}: known are {', '.join(ENGINES)}")
    return ENGINES[name]
