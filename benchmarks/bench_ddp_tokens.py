"""Training throughput on 2 CPU processes (gloo DDP): batch_rebalance vs random (and group_by_length).

A real ``hf_lightning.Trainer`` run per strategy, launched as 2 processes with the variables torchrun
sets. Workload: GPT-2 (2 layers, n_embd 128, vocabulary 256) on 2,048 sequences with long-tailed lengths
(lognormal ``mu=4.5, sigma=1``, clipped to [8, 512], fixed seed), ``per_device_train_batch_size=8``,
``gradient_accumulation_steps=4`` (8 optimizer steps = one epoch), one thread per process. Each
micro-batch is padded to its longest sequence.

Figure: real (non-padding) tokens trained per second over both ranks
(``include_num_input_tokens_seen="non_padding"``), from the start of the first optimizer step to the
end of the epoch (process start-up and Lightning's setup excluded), median over interleaved rounds;
the padding fraction of the micro-batches trained; the ratio to ``random``. A DDP step lasts as long
as its slowest rank, which is what batch_rebalance's cross-rank balancing shortens. About 90 s per round.

    python benchmarks/bench_ddp_tokens.py [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

__all__ = ["main"]

STRATEGIES = ("random", "group_by_length", "batch_rebalance")
NUM_SAMPLES, BATCH, GA, WORLD, MAX_LEN = 512, 8, 4, 2, 512


def make_dataset() -> list[dict[str, torch.Tensor]]:
    """512 token sequences of lognormal(4.5, 1) lengths clipped to [8, 512]."""
    rng = np.random.default_rng(0)
    lengths = np.clip(rng.lognormal(4.5, 1.0, NUM_SAMPLES), 8, MAX_LEN).astype(int)
    g = torch.Generator().manual_seed(0)
    return [{"input_ids": torch.randint(1, 256, (int(n),), generator=g)} for n in lengths]


class PadCounter:
    """Right-pads ``input_ids`` (labels -100 on padding) and counts real and padded tokens."""

    def __init__(self) -> None:
        self.real = self.padded = 0

    def __call__(self, features: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
        width = max(len(f["input_ids"]) for f in features)
        ids = torch.zeros(len(features), width, dtype=torch.long)
        mask = torch.zeros(len(features), width, dtype=torch.long)
        for row, f in enumerate(features):
            ids[row, : len(f["input_ids"])] = f["input_ids"]
            mask[row, : len(f["input_ids"])] = 1
        self.real += int(mask.sum())
        self.padded += mask.numel()
        return {"input_ids": ids, "attention_mask": mask, "labels": ids.masked_fill(mask == 0, -100)}


def train_once(strategy: str, out_dir: str) -> dict[str, float]:
    """One epoch with the Trainer on this process: tokens/s over its optimizer steps, token counts."""
    from transformers import GPT2Config, GPT2LMHeadModel

    from hf_lightning import Trainer, TrainerCallback, TrainingArguments

    marks: list[tuple[float, int]] = []

    class Clock(TrainerCallback):
        def on_step_begin(self, args, state, control, **kwargs):
            if not marks:
                marks.append((time.perf_counter(), state.num_input_tokens_seen))

        def on_step_end(self, args, state, control, **kwargs):
            marks.append((time.perf_counter(), state.num_input_tokens_seen))

    torch.manual_seed(0)
    config = GPT2Config(
        n_layer=2,
        n_embd=128,
        n_head=4,
        vocab_size=256,
        n_positions=MAX_LEN,
        bos_token_id=0,
        eos_token_id=0,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
    )
    args = TrainingArguments(
        out_dir,
        use_cpu=True,
        report_to="none",
        disable_tqdm=True,
        save_strategy="no",
        per_device_train_batch_size=BATCH,
        gradient_accumulation_steps=GA,
        num_train_epochs=1,
        train_sampling_strategy=strategy,
        include_num_input_tokens_seen="non_padding",
        logging_strategy="no",
        seed=0,
    )
    collator = PadCounter()
    Trainer(
        model=GPT2LMHeadModel(config),
        args=args,
        train_dataset=make_dataset(),
        data_collator=collator,
        callbacks=[Clock()],
    ).train()
    (t0, n0), (t1, n1) = marks[0], marks[-1]
    return {"tokens_per_s": (n1 - n0) / (t1 - t0), "real": collator.real, "padded": collator.padded}


def worker(out: Path, rounds: int) -> None:
    """Run every strategy ``rounds`` times, interleaved; write this rank's results."""
    torch.set_num_threads(1)
    rank = int(os.environ["RANK"])
    results: dict[str, list[dict[str, float]]] = {s: [] for s in STRATEGIES}
    for _ in range(rounds):
        for strategy in STRATEGIES:
            results[strategy].append(train_once(strategy, str(out / "run")))
    (out / f"rank{rank}.json").write_text(json.dumps(results))


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def launch(out: Path, rounds: int) -> list[dict[str, list[dict[str, float]]]]:
    """Start the 2 worker processes and return each rank's results."""
    port, procs = str(_free_port()), []
    for rank in range(WORLD):
        env = {
            **os.environ,
            "WORLD_SIZE": str(WORLD),
            "RANK": str(rank),
            "LOCAL_RANK": str(rank),
            "LOCAL_WORLD_SIZE": str(WORLD),
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": port,
            "OMP_NUM_THREADS": "1",
        }
        command = [sys.executable, __file__, "--worker", str(out), "--rounds", str(rounds)]
        procs.append(
            subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        )
    logs = [proc.communicate()[0] for proc in procs]
    for rank, proc in enumerate(procs):
        if proc.returncode:
            raise RuntimeError(f"rank {rank} failed:\n{logs[rank][-4000:]}")
    return [json.loads((out / f"rank{rank}.json").read_text()) for rank in range(WORLD)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--worker", type=Path, default=None, help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.worker is not None:
        worker(options.worker, options.rounds)
        return
    with tempfile.TemporaryDirectory() as tmp:
        ranks = launch(Path(tmp), options.rounds)
    print(
        f"2 CPU processes (gloo), GPT-2 2x128, {NUM_SAMPLES} sequences lognormal(4.5, 1) in [8, {MAX_LEN}], "
        f"per_device {BATCH}, GA {GA}, one epoch, median of {options.rounds} rounds\n"
    )
    print("| strategy | tokens/s (2 ranks) | padding % | vs random |")
    print("|---|---:|---:|---:|")
    speed = {s: statistics.median(r["tokens_per_s"] for r in ranks[0][s]) for s in STRATEGIES}
    for strategy in STRATEGIES:
        real = sum(r["real"] for rank in ranks for r in rank[strategy])
        padded = sum(r["padded"] for rank in ranks for r in rank[strategy])
        print(
            f"| {strategy} | {speed[strategy]:,.0f} | {100 * (1 - real / padded):.1f} "
            f"| {speed[strategy] / speed['random']:.2f}x |"
        )


if __name__ == "__main__":
    main()
