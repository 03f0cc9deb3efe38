#!/usr/bin/env python
"""Peer strength of LLM's inference stage: its tokens/s on bare metal against llama.cpp's own
benchmark tool, ``llama-bench``, built from the same vendored llama.cpp source (the locked
llama-cpp-python sdist, with the stack's CMake options), on the same GGUF, prompt and output
lengths and threads. Prints both and their ratio.

What is compared: a request of ``--prompt`` tokens prefilled and ``--output`` tokens decoded one at
a time (greedy), as the app's inference stage runs it (``dlvirt.apps.llm_engine``: llama-cpp-python,
flash attention off as its default), against ``llama-bench -pg PROMPT,OUTPUT`` (the same request
shape; ``-fa off``, batch and micro-batch 512 as the engine's). Prefill (``-p``) and decode (``-n``)
alone are printed too. The GGUF is the app's random model at ``--architecture`` (written once
into ``--work``).

    python benchmarks/llm_peer.py [--architecture smollm2-135m] [--prompt 128] [--output 32]
                                  [--threads 2] [--repetitions 5] [--rounds 3] [--work resources/llm-peer]
                                  [--llama-bench PATH]

Rates count token evaluations: llama-bench's ``pg`` evaluates the prompt and ``OUTPUT`` generated
tokens, the engine the prompt and ``OUTPUT - 1`` (its first output token comes from prefill's
logits). Decode (``tg``) differs in where it starts: llama-bench's from an empty context, the
engine's after the prompt (a slightly longer attention). ``--rounds`` alternate both, so that a drift in
the machine's speed hits both; the median ratio is printed.

llama-bench is built once into ``--work`` (cmake + a C++ compiler: llama.cpp compiled again, tens of
minutes on 2 busy cores), or given (``--llama-bench``: e.g. from the tree that built the installed
llama-cpp-python, reconfigured with ``-DLLAMA_BUILD_TOOLS=ON``); the sdist comes through pip from the
lock (its sha256 checked). Where it cannot be built the script says why and compares with
llama-cpp-python's low-level decode loop (``llama_decode`` on one batch a step, no Python
bookkeeping) instead.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import numpy as np

from dlvirt.apps.llm import TextGeneration
from dlvirt.apps.llm_engine import LlamaCpp
from dlvirt.platforms.container_image import LLAMA_CPP_CMAKE, host_stack

REPO = Path(__file__).resolve().parents[1]
PACKAGE = "llama-cpp-python"


def locked(name: str, lock: Path) -> tuple[str, list[str]]:
    """The lock's version of ``name`` and its archives' sha256s."""
    text = lock.read_text().replace("\\\n", " ")
    spelled = "[-_.]".join(re.escape(part) for part in re.split(r"[-_.]", name))  # pip normalises names
    match = re.search(rf"^{spelled}==(\S+)((?:\s+--hash=sha256:\w+)*)", text, re.M | re.I)
    if match is None:
        raise SystemExit(f"{name} is not in {lock}")
    return match.group(1), re.findall(r"sha256:(\w+)", match.group(2))


def build_llama_bench(work: Path) -> Path:
    """llama-bench from the locked sdist's vendored llama.cpp, with the stack's CMake options."""
    binary = work / "build" / "bin" / "llama-bench"
    if binary.is_file():
        return binary
    lock = REPO / ("envs/requirements.txt" if host_stack() == "cpu" else "envs/requirements-gpu.txt")
    version, hashes = locked(PACKAGE, lock)
    sdists = work / "sdist"
    pins = work / "pin.txt"
    work.mkdir(parents=True, exist_ok=True)
    pins.write_text(f"{PACKAGE}=={version} " + " ".join(f"--hash=sha256:{h}" for h in hashes) + "\n")
    subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary", ":all:",
                    "--require-hashes", "-r", str(pins), "-d", str(sdists)], check=True)
    archive = next(sdists.glob("llama_cpp_python-*.tar.gz"))
    source = work / "source"
    shutil.rmtree(source, ignore_errors=True)
    with tarfile.open(archive) as tar:
        tar.extractall(source, filter="data")
    vendored = next(source.glob("llama_cpp_python-*")) / "vendor" / "llama.cpp"
    options = (REPO / LLAMA_CPP_CMAKE.format(host_stack())).read_text().split()
    options = [o for o in options if not o.startswith("-DLLAVA")]  # the Python package's option only
    subprocess.run(["cmake", "-S", str(vendored), "-B", str(work / "build"), "-DCMAKE_BUILD_TYPE=Release",
                    "-DLLAMA_CURL=OFF", "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF",
                    "-DLLAMA_BUILD_SERVER=OFF", *options], check=True, stdout=subprocess.DEVNULL)
    subprocess.run(["cmake", "--build", str(work / "build"), "--target", "llama-bench", "-j", str(os.cpu_count())],
                   check=True, stdout=subprocess.DEVNULL)
    return binary


def llama_bench(binary: Path, model: Path, prompt: int, output: int, threads: int, reps: int) -> dict[str, float]:
    """llama-bench's mean tokens/s of prefill (pp), decode (tg) and the request (pg)."""
    out = subprocess.run([str(binary), "-m", str(model), "-p", str(prompt), "-n", str(output),
                          "-pg", f"{prompt},{output}", "-t", str(threads), "-r", str(reps), "-fa", "off",
                          "-b", "512", "-ub", "512", "-o", "json"], check=True, capture_output=True, text=True)
    rates: dict[str, float] = {}
    for test in json.loads(out.stdout):
        name = "pg" if test["n_prompt"] and test["n_gen"] else "pp" if test["n_prompt"] else "tg"
        rates[name] = float(test["avg_ts"])
    return rates


def ours(engine: LlamaCpp, prompt: int, output: int, reps: int, vocab: int) -> dict[str, float]:
    """The app's inference stage: prefill, then greedy decode one token at a time; mean tokens/s."""
    rng = np.random.default_rng(0)
    tokens = [1, *rng.integers(259, vocab, size=prompt - 1).tolist()]
    engine.decode(engine.prefill(tokens))  # warm-up, as llama-bench's
    pp, tg, pg = [], [], []
    for _ in range(reps):
        start = time.perf_counter()
        token = engine.prefill(tokens)
        prefilled = time.perf_counter()
        for _ in range(output - 1):
            token = engine.decode(token)
        done = time.perf_counter()
        pp.append(prompt / (prefilled - start))
        tg.append((output - 1) / (done - prefilled))
        pg.append((prompt + output - 1) / (done - start))  # token evaluations: the first output comes from prefill
    return {"pp": float(np.mean(pp)), "tg": float(np.mean(tg)), "pg": float(np.mean(pg))}


def low_level(engine: LlamaCpp, prompt: int, output: int, reps: int) -> dict[str, float]:
    """The fallback peer: llama_decode directly, one batch a step, no sampling."""
    import llama_cpp

    llm = engine.llm
    batch = llama_cpp.llama_batch_init(512, 0, 1)
    ctx = llm.ctx
    pg = []
    try:
        for _ in range(reps + 1):
            llm.reset()
            llm._ctx.kv_cache_clear()
            start = time.perf_counter()
            batch.n_tokens = prompt
            for i in range(prompt):
                batch.token[i], batch.pos[i], batch.n_seq_id[i] = 1 + i % 200, i, 1
                batch.seq_id[i][0], batch.logits[i] = 0, i == prompt - 1
            llama_cpp.llama_decode(ctx, batch)
            for step in range(output - 1):
                batch.n_tokens = 1
                batch.token[0], batch.pos[0], batch.n_seq_id[0] = 5, prompt + step, 1
                batch.seq_id[0][0], batch.logits[0] = 0, True
                llama_cpp.llama_decode(ctx, batch)
            pg.append((prompt + output) / (time.perf_counter() - start))
    finally:
        llama_cpp.llama_batch_free(batch)
    return {"pg": float(np.mean(pg[1:]))}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--architecture", default="smollm2-135m")
    parser.add_argument("--quantisation", default="Q8_0")
    parser.add_argument("--prompt", type=int, default=128)
    parser.add_argument("--output", type=int, default=32)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--repetitions", type=int, default=5)
    parser.add_argument("--work", type=Path, default=REPO / "resources" / "llm-peer")
    parser.add_argument("--llama-bench", type=Path, default=None,
                        help="a llama-bench already built from the same source (else built into --work)")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds of both (the median ratio)")
    args = parser.parse_args()
    settings = {"architecture": args.architecture, "quantisation": args.quantisation, "seed": 0}
    model = args.work / TextGeneration.weights_tag(settings) / TextGeneration.weights_file_name(settings)
    if not model.is_file():
        TextGeneration.write_model(settings, args.work, model)
    context = args.prompt + args.output + 16
    engine = LlamaCpp(model, args.threads, "CPU", context, 0)
    vocab = int(engine.llm.n_vocab())
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor())
    print(f"CPU: {cpu}; threads {args.threads}; {args.architecture} {args.quantisation}; "
          f"prompt {args.prompt}, output {args.output}; {args.repetitions} repetitions a round, {args.rounds} rounds")
    try:
        binary = args.llama_bench or build_llama_bench(args.work)

        def peer_round() -> dict[str, float]:
            return llama_bench(binary, model, args.prompt, args.output, args.threads, args.repetitions)

        what = "llama-bench"
        print(f"peer: {binary}")
    except (subprocess.CalledProcessError, OSError, StopIteration) as err:
        print(f"llama-bench could not be built ({err}): comparing with the low-level decode loop")

        def peer_round() -> dict[str, float]:
            return low_level(engine, args.prompt, args.output, args.repetitions)

        what = "llama_decode-loop"
    ratios = []
    for k in range(args.rounds):  # alternating, so that a drift in the machine's speed hits both
        mine = ours(engine, args.prompt, args.output, args.repetitions, vocab)
        peer = peer_round()
        for name, title in (("pp", "prefill"), ("tg", "decode"), ("pg", "request (prefill + decode)")):
            if name in peer:
                print(f"round {k + 1} {title:27s} dlvirt {mine[name]:9.1f} tok/s   {what} {peer[name]:9.1f} tok/s   "
                      f"ratio {mine[name] / peer[name]:.3f}")
        ratios.append(mine["pg"] / peer["pg"])
    print(f"peer ratio (request tokens/s, dlvirt / {what}), median of {len(ratios)} rounds: "
          f"{float(np.median(ratios)):.3f} (rounds: {', '.join(f'{r:.3f}' for r in ratios)})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
