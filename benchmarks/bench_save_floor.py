"""One synchronous save against transformers' way of saving and against the disk, in one process.

The model and AdamW state of ``bench_checkpoint.py`` (``--size``) are built once; then, in each round
and in a random order, with ``os.sync()`` before each:

- **transformers**: what its ``_save_checkpoint`` writes (``save_pretrained``, ``torch.save`` of the
  optimizer, scheduler and RNG state), never flushed;
- **hf_lightning**: ``hf_lightning.checkpoint.store.save_checkpoint`` of the same state (staging folder,
  XXH3-128 while writing, every file flushed, manifest, rename);
- **write+fdatasync**: as many bytes as that checkpoint, written in 4 MiB blocks, then ``fdatasync``-ed
  once (a durable write that does not overlap the writing with the disk's).

Printed: the median seconds of each (one hf_lightning save before the rounds takes the first-use
costs) and the median of the per-round ratios.
No Trainer runs, so the figures are the saves alone; ``bench_checkpoint.py`` measures them inside
training runs.

    python benchmarks/bench_save_floor.py [--size 400MB|2GB] [--rounds 5] [--seed 0]
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bench_checkpoint import _model, disk_floor  # noqa: E402


def _state(size: str):
    import torch

    torch.set_num_threads(1)
    model = _model(size)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    ids = torch.randint(0, 32000, (2, 32))
    model(ids, labels=ids).loss.backward()
    optimizer.step()
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
    return model, optimizer, scheduler


def _transformers_like(folder: str, model, optimizer, scheduler) -> None:
    import torch

    os.makedirs(folder)
    model.save_pretrained(folder)
    torch.save(optimizer.state_dict(), os.path.join(folder, "optimizer.pt"))
    torch.save(scheduler.state_dict(), os.path.join(folder, "scheduler.pt"))
    torch.save({"cpu": torch.get_rng_state()}, os.path.join(folder, "rng_state.pth"))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--size", choices=("400MB", "2GB"), default="400MB")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tmp", default=None, help="where the files are written (default: the system's)")
    cli = parser.parse_args()
    from hf_lightning.checkpoint.store import save_checkpoint

    model, optimizer, scheduler = _state(cli.size)
    root = tempfile.mkdtemp(prefix="bench_save_floor_", dir=cli.tmp)
    size = 0

    def ours(step: int) -> None:
        nonlocal size
        folder = save_checkpoint(root, step, model=model, optimizer=optimizer, scheduler=scheduler,
                                 state={"global_step": step})  # fmt: skip
        size = sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(folder) for f in fs)

    jobs = {
        "transformers": lambda step: _transformers_like(
            os.path.join(root, f"hf-{step}"), model, optimizer, scheduler
        ),
        "hf_lightning": ours,
        "write+fdatasync": lambda step: disk_floor(size, root),
    }
    order, seconds = random.Random(cli.seed), {name: [] for name in jobs}
    ours(0)  # first-use costs, and the checkpoint's size for the floor
    for step in range(1, cli.rounds + 1):
        for name in order.sample(list(jobs), len(jobs)):
            for entry in os.listdir(root):
                shutil.rmtree(os.path.join(root, entry))
            os.sync()
            started = time.perf_counter()
            jobs[name](step)
            seconds[name].append(time.perf_counter() - started)
    shutil.rmtree(root, ignore_errors=True)
    print(
        f"Save of {size / 1e6:.0f} MB, {cli.rounds} rounds; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs"
    )
    print("| save | s (median) | vs transformers | vs write+fdatasync |")
    print("|---|---:|---:|---:|")
    for name, values in seconds.items():
        ratios = [
            statistics.median(a / b for a, b in zip(values, seconds[other]))
            for other in ("transformers", "write+fdatasync")
        ]
        print(f"| {name} | {statistics.median(values):.2f} | {ratios[0]:.2f}x | {ratios[1]:.2f}x |")


if __name__ == "__main__":
    main()
