"""SR's dataset in MLPerf's layout: ``dev-clean-wav/…/*.wav`` plus the ``dev-clean-wav.json``
manifest, read from a real copy or converted from LibriSpeech's ``dev-clean.tar.gz``.
"""

from __future__ import annotations

import json
import tarfile
from pathlib import Path
from typing import Any

from dlvirt.apps.base import AppError
from dlvirt.apps.sr.features import SAMPLE_RATE, write_wav
from dlvirt.core.atomic import write_text_atomic

MAX_SECONDS = 15.0  # MLPerf keeps dev-clean clips up to 15 s
MANIFEST = "dev-clean-wav.json"
LIBRISPEECH_DEV_CLEAN_URL = "https://www.openslr.org/resources/12/dev-clean.tar.gz"
# SHA-256 of OpenSLR's archive (OpenSLR itself publishes md5 42e2234ba48799c1f50f24a7926300a1).
LIBRISPEECH_DEV_CLEAN_SHA256 = "76f87d090650617fca0cac8f88b9416e0ebf80350acb97b343a85fa903728ab3"


def manifest_entry(fname: str, num_samples: int, text: str) -> dict[str, Any]:
    """One utterance in the shape of MLPerf's ``dev-clean-wav.json``."""
    duration = num_samples / SAMPLE_RATE
    return {"transcript": text, "original_duration": duration, "original_num_samples": num_samples,
            "files": [{"channels": 1, "sample_rate": float(SAMPLE_RATE), "bitrate": 16, "duration": duration,
                       "num_samples": num_samples, "encoding": "Signed Integer PCM", "silent": False,
                       "fname": fname, "speed": 1}]}


def read_manifest(root: Path) -> list[dict[str, Any]]:
    path = root / MANIFEST
    try:
        entries = json.loads(path.read_text())
        return [{"fname": e["files"][0]["fname"], "duration": float(e["files"][0]["duration"]),
                 "transcript": str(e["transcript"])} for e in entries]
    except FileNotFoundError as err:
        raise AppError(f"apps.sr.dataset.path {root}: no {MANIFEST} (MLPerf's LibriSpeech manifest)") from err
    except (ValueError, KeyError, IndexError, TypeError) as err:
        raise AppError(f"{path}: not a {MANIFEST}-style manifest ({err!r})") from err


def convert_librispeech(archive: Path, out_dir: Path, max_seconds: float = MAX_SECONDS) -> dict[str, Any]:
    """LibriSpeech ``dev-clean.tar.gz`` → ``dev-clean-wav/…/*.wav`` plus ``dev-clean-wav.json``,
    dropping clips longer than ``max_seconds`` (as MLPerf's SR workload does)."""
    import soundfile

    out_dir = Path(out_dir)
    entries = []
    dropped = 0
    with tarfile.open(archive, "r:gz") as tar:
        members = {m.name: m for m in tar.getmembers() if m.isfile()}
        for name in sorted(n for n in members if n.endswith(".trans.txt")):
            chapter = name.rsplit("/", 1)[0]
            text = tar.extractfile(members[name])
            assert text is not None
            for line in text.read().decode().splitlines():
                if not line.strip():
                    continue
                utterance, words = line.split(" ", 1)
                flac = tar.extractfile(members[f"{chapter}/{utterance}.flac"])
                assert flac is not None
                audio, rate = soundfile.read(flac, dtype="int16")
                if rate != SAMPLE_RATE or audio.ndim != 1:
                    raise AppError(f"{archive}: {utterance}.flac is {rate} Hz with shape {audio.shape}, "
                                   "not 16 kHz mono")
                if len(audio) > max_seconds * SAMPLE_RATE:
                    dropped += 1
                    continue
                speaker, book, _ = utterance.split("-")
                fname = f"dev-clean-wav/{speaker}/{book}/{utterance}.wav"
                write_wav(out_dir / fname, audio)
                entries.append(manifest_entry(fname, len(audio), words.lower()))
    if not entries:
        raise AppError(f"{archive}: no LibriSpeech utterances of at most {max_seconds} s found")
    write_text_atomic(out_dir / MANIFEST, json.dumps(entries))
    return {"utterances": len(entries), "dropped_over_max_seconds": dropped}
