"""Padding-efficiency benchmark of the training samplers: ours next to transformers' own.

4,096 sequences with lognormal lengths (``mu=5, sigma=1``, clipped to [8, 1024], fixed seed),
``per_device_train_batch_size=8``, ``gradient_accumulation_steps=4``, world sizes 1, 2 and 4 (ranks
simulated in one process). For each strategy and world size it reports, over one epoch:

* padding %: padding tokens / padded tokens (``n_samples × max_len`` per micro-batch), all ranks;
* largest micro-batch: padded tokens of the step's largest micro-batch, mean over steps;
* imbalance: max rank cost / mean rank cost per optimizer step (cost = the rank's padded tokens in
  the step), mean over steps and the worst step.

transformers' rows reproduce how its 5.24 ``Trainer`` feeds ranks: one global sampler cut into
per-device batches that ``accelerate`` deals round-robin to the ranks (``BatchSamplerShard``), and
the rank-aware ``BatchRebalanceSampler``. Run: ``python benchmarks/bench_samplers.py``.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable

import numpy as np
import torch

from hf_lightning.adapters.samplers import build_train_sampler

__all__ = ["make_lengths", "measure", "run"]

NUM_SAMPLES, BATCH, GA, SEED = 4096, 8, 4, 42
WORLD_SIZES = (1, 2, 4)
STRATEGIES = ("random", "group_by_length", "batch_rebalance")
RankBatches = list[list[list[int]]]  # [rank][micro-batch] -> sample indices


def make_lengths(num_samples: int = NUM_SAMPLES, seed: int = 0) -> list[int]:
    """The benchmark's length distribution: lognormal, clipped to [8, 1024]."""
    rng = np.random.default_rng(seed)
    return np.clip(rng.lognormal(5.0, 1.0, num_samples), 8, 1024).astype(int).tolist()


def _batches(indices: list[int], size: int) -> list[list[int]]:
    return [indices[i : i + size] for i in range(0, len(indices), size)]


def ours(strategy: str, lengths: list[int], world: int) -> RankBatches:
    """Each simulated rank's micro-batches from our samplers."""
    per_rank = []
    for rank in range(world):
        sampler, batch_sampler = build_train_sampler(
            strategy, lengths, batch_size=BATCH, gradient_accumulation_steps=GA,
            num_replicas=world, rank=rank, seed=SEED, drop_last=True,
        )  # fmt: skip
        per_rank.append(list(batch_sampler) if batch_sampler is not None else _batches(list(sampler), BATCH))
    return per_rank


def theirs(strategy: str, lengths: list[int], world: int) -> RankBatches:
    """Each simulated rank's micro-batches as transformers 5.24's Trainer produces them."""
    from transformers.trainer_pt_utils import BatchRebalanceSampler, LengthGroupedSampler

    if strategy == "batch_rebalance":
        return [
            list(BatchRebalanceSampler(lengths, BATCH * GA * world, world, GA, seed=SEED, rank=rank))
            for rank in range(world)
        ]
    generator = torch.Generator().manual_seed(SEED)
    if strategy == "group_by_length":
        order = list(LengthGroupedSampler(BATCH * GA, lengths=lengths, generator=generator))
    else:
        order = torch.randperm(len(lengths), generator=generator).tolist()
    batches = _batches(order, BATCH)
    return [batches[rank::world] for rank in range(world)]


def measure(per_rank: RankBatches, lengths: list[int]) -> dict[str, float]:
    """Padding %, mean largest micro-batch and cross-rank imbalance over full optimizer steps."""
    steps = min(len(batches) for batches in per_rank) // GA
    padded = real = 0
    largest, imbalance = [], []
    for step in range(steps):
        rank_costs = []
        for batches in per_rank:
            micro = batches[step * GA : (step + 1) * GA]
            costs = [len(b) * max(lengths[i] for i in b) for b in micro]
            real += sum(lengths[i] for b in micro for i in b)
            padded += sum(costs)
            rank_costs.append(sum(costs))
            largest.append(max(costs))
        imbalance.append(max(rank_costs) / statistics.fmean(rank_costs))
    step_largest = [max(largest[s * len(per_rank) : (s + 1) * len(per_rank)]) for s in range(steps)]
    return {
        "padding": 100.0 * (1 - real / padded),
        "largest": statistics.fmean(step_largest),
        "imbalance": statistics.fmean(imbalance),
        "worst": max(imbalance),
    }


def run(print_fn: Callable[[str], None] = print) -> list[dict[str, object]]:
    """Measure every (world size, strategy, implementation) and print one markdown table."""
    lengths = make_lengths()
    rows = []
    print_fn(
        f"{NUM_SAMPLES} sequences, lognormal(5, 1) lengths clipped to [8, 1024], per_device {BATCH}, GA {GA}\n"
    )
    print_fn(
        "| world | strategy | impl | padding % | largest micro-batch (tokens) | imbalance mean | worst |"
    )
    print_fn("|---:|---|---|---:|---:|---:|---:|")
    for world in WORLD_SIZES:
        for strategy in STRATEGIES:
            for impl, build in (("hf_lightning", ours), ("transformers", theirs)):
                result = measure(build(strategy, lengths, world), lengths)
                rows.append({"world": world, "strategy": strategy, "impl": impl, **result})
                print_fn(
                    f"| {world} | {strategy} | {impl} | {result['padding']:.1f} | {result['largest']:.0f} "
                    f"| {result['imbalance']:.3f} | {result['worst']:.3f} |"
                )
    return rows


if __name__ == "__main__":
    run()
