"""Parity of the training samplers with transformers 5.24 (trainer_pt_utils).

group_by_length: the same indices as transformers' samplers for the same seed, epoch and lengths.
batch_rebalance: deliberately a different search (see adapters/samplers_rebalance.py), so the
micro-batches differ; the tests check that each step draws the same samples and that ours is at
least as good on padding, largest micro-batch and cross-rank balance.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from transformers.trainer_pt_utils import BatchRebalanceSampler as HFBatchRebalanceSampler
from transformers.trainer_pt_utils import DistributedLengthGroupedSampler as HFDistributedLengthGroupedSampler
from transformers.trainer_pt_utils import LengthGroupedSampler as HFLengthGroupedSampler
from transformers.trainer_pt_utils import get_length_grouped_indices

from hf_lightning.adapters.samplers import (
    BatchRebalanceSampler,
    DistributedLengthGroupedSampler,
    LengthGroupedSampler,
    length_grouped_indices,
)

GA, BATCH, SEED = 4, 8, 42


def bench_lengths(n: int = 4096) -> list[int]:
    """The benchmark's distribution (benchmarks/bench_samplers.py): lognormal clipped to [8, 1024]."""
    return np.clip(np.random.default_rng(0).lognormal(5.0, 1.0, n), 8, 1024).astype(int).tolist()


LENGTH_TABLES = {
    "random": [int(v) for v in np.random.default_rng(1).integers(1, 512, 1001)],
    "many ties": [int(v) for v in np.random.default_rng(2).integers(1, 4, 400)],
    "tiny": [5, 3, 9, 1, 7],
    "benchmark": bench_lengths(2048),
}


@pytest.mark.parametrize("mult", [None, 1, 3])
@pytest.mark.parametrize("name", list(LENGTH_TABLES))
def test_length_grouped_indices_match(name: str, mult: int | None) -> None:
    """length_grouped_indices equals get_length_grouped_indices for the same generator."""
    lengths = LENGTH_TABLES[name]
    ours = length_grouped_indices(lengths, 4, mult, torch.Generator().manual_seed(11))
    theirs = get_length_grouped_indices(lengths, 4, mult, torch.Generator().manual_seed(11))
    assert ours == theirs


@pytest.mark.parametrize(("seed", "epoch"), [(0, 0), (42, 0), (42, 3)])
@pytest.mark.parametrize("name", list(LENGTH_TABLES))
def test_single_process_matches_length_grouped_sampler(name: str, seed: int, epoch: int) -> None:
    """Epoch e of ours equals transformers' LengthGroupedSampler with a generator seeded seed + e."""
    lengths = LENGTH_TABLES[name]
    ours = LengthGroupedSampler(16, lengths=lengths, seed=seed)
    ours.set_epoch(epoch)
    theirs = HFLengthGroupedSampler(
        16, lengths=lengths, generator=torch.Generator().manual_seed(seed + epoch)
    )
    assert list(ours) == list(theirs)


@pytest.mark.parametrize(
    ("world", "drop_last", "epoch"), list(itertools.product([2, 3, 4], [False, True], [0, 2]))
)
@pytest.mark.parametrize("name", ["random", "many ties", "tiny"])
def test_distributed_matches_distributed_length_grouped_sampler(name, world, drop_last, epoch) -> None:
    """Every rank's indices equal transformers' DistributedLengthGroupedSampler's."""
    lengths = LENGTH_TABLES[name]
    for rank in range(world):
        ours = DistributedLengthGroupedSampler(16, None, world, rank, 7, drop_last, lengths)
        theirs = HFDistributedLengthGroupedSampler(16, None, world, rank, 7, drop_last, lengths)
        ours.set_epoch(epoch)
        theirs.set_epoch(epoch)
        assert list(ours) == list(theirs) and len(ours) == len(theirs)


def _ours(lengths: list[int], world: int) -> list[list[list[int]]]:
    return [
        list(BatchRebalanceSampler(lengths, BATCH, GA, num_replicas=world, rank=r, seed=SEED, drop_last=True))
        for r in range(world)
    ]


def _theirs(lengths: list[int], world: int) -> list[list[list[int]]]:
    return [
        list(HFBatchRebalanceSampler(lengths, BATCH * GA * world, world, GA, seed=SEED, rank=r))
        for r in range(world)
    ]


def _steps(per_rank: list[list[list[int]]]) -> list[list[list[int]]]:
    """Regroup per-rank micro-batches into per-step lists of all ranks' micro-batches."""
    steps = len(per_rank[0]) // GA
    return [[b for batches in per_rank for b in batches[s * GA : (s + 1) * GA]] for s in range(steps)]


def _metrics(per_rank: list[list[list[int]]], lengths: list[int]) -> tuple[float, float, float]:
    padded = real = 0
    largest, imbalance = [], []
    for step in range(len(per_rank[0]) // GA):
        totals = []
        for batches in per_rank:
            costs = [len(b) * max(lengths[i] for i in b) for b in batches[step * GA : (step + 1) * GA]]
            real += sum(lengths[i] for b in batches[step * GA : (step + 1) * GA] for i in b)
            padded += sum(costs)
            totals.append(sum(costs))
            largest.append(max(costs))
        imbalance.append(max(totals) / np.mean(totals))
    return 1 - real / padded, float(np.mean(largest)), float(np.mean(imbalance))


@pytest.mark.parametrize("world", [1, 2, 4])
def test_rebalance_steps_draw_the_same_samples(world: int) -> None:
    """With the same seed, each optimizer step covers the same samples as transformers' sampler."""
    lengths = bench_lengths(1024)
    ours, theirs = _steps(_ours(lengths, world)), _steps(_theirs(lengths, world))
    assert len(ours) == len(theirs)
    for mine, hf in zip(ours, theirs):
        assert sorted(itertools.chain(*mine)) == sorted(itertools.chain(*hf))


@pytest.mark.parametrize("world", [1, 2, 4])
def test_rebalance_is_at_least_as_good_as_transformers(world: int) -> None:
    """Ours has no more padding, no larger largest micro-batch, and no worse rank balance."""
    lengths = bench_lengths()
    ours, theirs = _metrics(_ours(lengths, world), lengths), _metrics(_theirs(lengths, world), lengths)
    assert ours[0] <= theirs[0] and ours[1] <= theirs[1] and ours[2] <= theirs[2]
    assert ours[2] <= 1.05


def test_rebalance_micro_batches_differ_by_design() -> None:
    """Documented divergence: a min-max cut plus rank balancing, not transformers' hill climbing.

    transformers' groups minimise spread under a cost with an extra 0.001·n·L² attention term and
    are dealt to ranks by cost rank; ours minimises the largest padded micro-batch exactly and then
    balances rank totals, so the micro-batches are not the same (and ours score better above).
    """
    lengths = bench_lengths(512)
    assert _steps(_ours(lengths, 2)) != _steps(_theirs(lengths, 2))


def test_transformers_group_by_length_order_follows_the_global_generator() -> None:
    """Divergence 15: transformers' LengthGroupedSampler (no generator, as its Trainer builds it) draws its
    order from the global generator; ours is a function of (seed, epoch) whatever was drawn before."""
    lengths = LENGTH_TABLES["random"]
    theirs, ours = (
        HFLengthGroupedSampler(16, lengths=lengths),
        LengthGroupedSampler(16, lengths=lengths, seed=0),
    )
    torch.manual_seed(0)
    first_theirs, first_ours = list(theirs), list(ours)
    torch.rand(3)  # dropout, a random collator, ... drew numbers before the next epoch's iteration
    torch.manual_seed(0)
    torch.rand(3)
    assert list(theirs) != first_theirs
    assert list(ours) == first_ours


@pytest.mark.parametrize("drop_last", [False, True])
@pytest.mark.parametrize("world", [2, 3])
@pytest.mark.parametrize("size", [0, 1, 5, 12, 22, 23])
def test_whole_batches_are_dealt_as_accelerate_deals_them(size: int, world: int, drop_last: bool) -> None:
    """ShardedSampler(per_device_batch_size=2) yields, per rank, accelerate's BatchSamplerShard batches over
    the same epoch order (what transformers' Trainer iterates under torchrun), and its length."""
    from accelerate.data_loader import BatchSamplerShard
    from torch.utils.data import BatchSampler

    from hf_lightning.adapters.samplers import ShardedSampler

    order = torch.randperm(size, generator=torch.Generator().manual_seed(SEED + 1)).tolist()
    for rank in range(world):
        ours = ShardedSampler(
            size, seed=SEED, num_replicas=world, rank=rank, drop_last=drop_last, per_device_batch_size=2
        )
        ours.set_epoch(1)
        theirs = [i for b in BatchSamplerShard(BatchSampler(order, 2, drop_last), world, rank) for i in b]
        assert list(ours) == theirs and len(ours) == len(theirs)


def test_lengths_of_items_without_input_ids_raise_transformers_words() -> None:
    """Dict items without ``input_ids``: both raise ValueError; ours starts with transformers' sentence."""
    from hf_lightning.data.collators import compute_lengths

    dataset = [{"x": [1, 2]}, {"x": [3]}]
    with pytest.raises(ValueError) as theirs:
        HFLengthGroupedSampler(2, dataset=dataset)
    with pytest.raises(ValueError) as ours:
        compute_lengths(dataset)
    assert str(ours.value).startswith(str(theirs.value).rstrip("."))
    assert "['x']" in str(ours.value)
