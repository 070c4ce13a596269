"""Benchmark: peak memory of ``Trainer.evaluate`` on a tiny LM with a 32k vocabulary.

Each configuration runs in a fresh process, its resident set size sampled every millisecond during
``evaluate()``, evaluating ``--sequences`` sequences of ``--length`` tokens with batches of 8:

- raw logits accumulated for ``compute_metrics`` (without and with ``eval_accumulation_steps``),
- ``preprocess_logits_for_metrics`` reducing the logits to their argmax,
- ``batch_eval_metrics`` (metrics per batch, nothing accumulated), at 2k and at 8k sequences.

glibc's mmap threshold is fixed (``MALLOC_MMAP_THRESHOLD_=65536``) so that freed blocks go back to
the system at once and the resident set size follows what the evaluation holds. Reported per
configuration: the rise of the peak CPU memory during ``evaluate()`` (and of the CUDA
peak when a GPU is used), and the bytes of the accumulated predictions. Targets of the issue: with
argmax preprocessing the predictions cost at most 1/1000 of the raw logits; with
``batch_eval_metrics`` the peak stays within 10% from 2k to 8k sequences.

    python benchmarks/bench_eval_memory.py            # the table, as in docs/performance.md
    python benchmarks/bench_eval_memory.py --length 4  # a quicker, smaller run
    python benchmarks/bench_eval_memory.py --compare   # plus the raw-logits rows on transformers.Trainer
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

import torch

__all__ = ["CONFIGS", "TinyLM", "main", "run_one"]

VOCAB = 32_000
#: name -> (sequences multiplier, TrainingArguments overrides, preprocess to argmax, per-batch metrics)
CONFIGS = {
    "raw logits": (1, {}, False, False),
    "raw logits, eval_accumulation_steps=16": (1, {"eval_accumulation_steps": 16}, False, False),
    "argmax (preprocess_logits_for_metrics)": (1, {}, True, False),
    "argmax + eval_accumulation_steps=16": (1, {"eval_accumulation_steps": 16}, True, False),
    "batch_eval_metrics": (1, {"batch_eval_metrics": True}, False, True),
    "batch_eval_metrics, 4x sequences": (4, {"batch_eval_metrics": True}, False, True),
}


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class PeakRSS:
    """The highest resident set size seen by a thread sampling every millisecond, above the start value."""

    def __enter__(self) -> PeakRSS:
        self.start = self.peak = _rss_bytes()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _sample(self) -> None:
        while not self._stop.wait(0.001):
            self.peak = max(self.peak, _rss_bytes())

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, _rss_bytes())

    @property
    def rise_mib(self) -> float:
        return (self.peak - self.start) / 2**20


def _nbytes(value) -> int:
    if value is None:
        return 0
    if isinstance(value, (list, tuple)):
        return sum(_nbytes(v) for v in value)
    return int(value.nbytes)


class TinyLM(torch.nn.Module):
    """Embedding and output head over a 32k vocabulary; returns the loss and the logits."""

    def __init__(self) -> None:
        super().__init__()
        self.embed, self.head = torch.nn.Embedding(VOCAB, 16), torch.nn.Linear(16, VOCAB)

    def forward(self, input_ids, labels=None):
        logits = self.head(self.embed(input_ids))
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), labels.flatten())
        return {"loss": loss, "logits": logits}


def _argmax(logits, labels):
    return logits.argmax(-1)


def _measure(trainer, data) -> tuple[float, float | None, float]:
    """(peak CPU rise in MiB, peak CUDA rise in MiB or None, seconds) of ``trainer.evaluate(data)``."""
    cuda = torch.cuda.is_available()
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    base_cuda, start = (torch.cuda.memory_allocated() if cuda else 0), time.time()
    with PeakRSS() as cpu:
        trainer.evaluate(data)
    cuda_rise = (torch.cuda.max_memory_allocated() - base_cuda) / 2**20 if cuda else None
    return cpu.rise_mib, cuda_rise, time.time() - start


def run_one(name: str, sequences: int, length: int, library: str = "hf_lightning") -> dict:
    """Evaluate one configuration in this process with ``library``'s Trainer; return its measurements."""
    lib = importlib.import_module(library)
    torch.set_num_threads(1)
    multiplier, overrides, argmax, per_batch = CONFIGS[name]
    count = sequences * multiplier
    rows = torch.randint(0, VOCAB, (count, length), generator=torch.Generator().manual_seed(0))
    data = [{"input_ids": row, "labels": row} for row in rows]
    largest = {"predictions": 0}

    def accuracy(eval_pred, compute_result=None):
        preds, labels = eval_pred.predictions, eval_pred.label_ids
        largest["predictions"] = max(largest["predictions"], _nbytes(preds))
        preds = preds.argmax(-1) if preds.ndim == 3 else preds
        hits = (preds == labels).float() if per_batch else (preds == labels)
        return {"accuracy": float(hits.mean())}

    with tempfile.TemporaryDirectory() as out:
        args = lib.TrainingArguments(
            out,
            per_device_eval_batch_size=8,
            report_to="none",
            disable_tqdm=True,
            use_cpu=not torch.cuda.is_available(),
            **overrides,
        )
        trainer = lib.Trainer(
            model=TinyLM().to(args.device),
            args=args,
            compute_metrics=accuracy,
            preprocess_logits_for_metrics=_argmax if argmax else None,
        )
        cpu_rise, cuda_rise, seconds = _measure(trainer, data)
    return {
        "name": name if library == "hf_lightning" else f"{name} [{library}]",
        "sequences": count,
        "cpu_peak_mib": cpu_rise,
        "cuda_peak_mib": cuda_rise,
        "predictions_bytes": largest["predictions"],
        "raw_logits_bytes": count * length * VOCAB * 4,
        "seconds": seconds,
    }


def _table(rows: list[dict]) -> str:
    lines = [
        "| configuration | sequences | peak CPU rise (MiB) | peak CUDA rise (MiB) | predictions per "
        "compute_metrics call | / raw logits | time (s) |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        cuda = "n/a" if r["cuda_peak_mib"] is None else f"{r['cuda_peak_mib']:.0f}"
        held = r["predictions_bytes"]
        ratio = f"1/{r['raw_logits_bytes'] / held:,.0f}" if held else "0"
        lines.append(
            f"| {r['name']} | {r['sequences']:,} | {r['cpu_peak_mib']:.0f} | {cuda} "
            f"| {held / 2**20:,.2f} MiB | {ratio} | {r['seconds']:.1f} |"
        )
    return "\n".join(lines)


def _run_all(options: argparse.Namespace) -> list[dict]:
    # A fixed mmap threshold makes glibc return freed blocks at once, so the resident set size follows the
    # memory the evaluation holds; with the dynamic default, freed 4 MB logits stay cached in the heap.
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536"}
    runs = [(name, "hf_lightning") for name in CONFIGS]
    if options.compare:
        runs += [(name, "transformers") for name in list(CONFIGS)[:2]]
    rows = []
    for name, library in runs:
        command = [
            sys.executable,
            __file__,
            "--one",
            name,
            "--sequences",
            str(options.sequences),
            "--length",
            str(options.length),
            "--library",
            library,
        ]
        out = subprocess.run(command, check=True, capture_output=True, text=True, env=env).stdout
        rows.append(json.loads(out.strip().splitlines()[-1]))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sequences", type=int, default=2000)
    parser.add_argument("--length", type=int, default=8)
    parser.add_argument("--compare", action="store_true", help="also run the raw-logits rows on transformers")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    parser.add_argument("--library", default="hf_lightning", help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.one:
        print(json.dumps(run_one(options.one, options.sequences, options.length, options.library)))
        return
    rows = _run_all(options)
    print(_table(rows))
    small, large = rows[4]["cpu_peak_mib"], rows[5]["cpu_peak_mib"]
    argmax_ratio = rows[2]["predictions_bytes"] / rows[2]["raw_logits_bytes"]
    print(f"\nargmax predictions / raw logits = 1/{1 / argmax_ratio:,.0f} (target <= 1/1000)")
    print(
        f"batch_eval_metrics peak, 4x sequences vs 1x: {large:.0f} vs {small:.0f} MiB "
        f"({(large - small) / max(small, 1e-9):+.0%}; target within 10%)"
    )


if __name__ == "__main__":
    main()
