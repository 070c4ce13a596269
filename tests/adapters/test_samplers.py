"""The training samplers: rank-aware, seeded by (seed, epoch), and the batch_rebalance guarantees."""

from __future__ import annotations

import itertools
from collections import Counter

import datasets
import numpy as np
import pytest
import torch
from torch.utils.data import DistributedSampler

from hf_lightning.adapters.samplers import (
    SAMPLING_STRATEGIES,
    BatchRebalanceSampler,
    LengthGroupedSampler,
    ShardedSampler,
    build_train_sampler,
)
from hf_lightning.adapters.samplers_rebalance import assign_to_ranks, min_max_partition


def bench_lengths(n: int = 4096) -> list[int]:
    """The benchmark's distribution (benchmarks/bench_samplers.py): lognormal clipped to [8, 1024]."""
    return np.clip(np.random.default_rng(0).lognormal(5.0, 1.0, n), 8, 1024).astype(int).tolist()


def cost(batch: list[int], lengths: list[int]) -> int:
    return len(batch) * max(lengths[i] for i in batch)


# --- random / sequential -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("size", "world", "shuffle", "drop_last"),
    list(itertools.product([10, 11], [1, 3], [True, False], [True, False])),
)
def test_sharded_sampler_equals_torch_distributed_sampler(size, world, shuffle, drop_last) -> None:
    """ShardedSampler yields exactly torch DistributedSampler's indices on every rank and epoch."""
    for rank, epoch in itertools.product(range(world), range(2)):
        ours = ShardedSampler(
            size, shuffle=shuffle, num_replicas=world, rank=rank, seed=5, drop_last=drop_last
        )
        torch_sampler = DistributedSampler(
            range(size), world, rank, shuffle=shuffle, seed=5, drop_last=drop_last
        )
        ours.set_epoch(epoch)
        torch_sampler.set_epoch(epoch)
        assert list(ours) == list(torch_sampler) and len(ours) == len(torch_sampler)


def test_samplers_default_to_one_process_without_process_group() -> None:
    """Without torch.distributed initialised the samplers act as rank 0 of 1."""
    sampler = ShardedSampler(6, shuffle=False)
    assert (sampler.num_replicas, sampler.rank, list(sampler)) == (1, 0, [0, 1, 2, 3, 4, 5])


@pytest.mark.parametrize(("num_replicas", "rank"), [(0, 0), (2, 2), (2, -1)])
def test_invalid_world_is_rejected(num_replicas: int, rank: int) -> None:
    """A rank outside [0, num_replicas) or a non-positive world size raises naming the argument."""
    with pytest.raises(ValueError, match=r"ShardedSampler\((num_replicas|rank)="):
        ShardedSampler(4, num_replicas=num_replicas, rank=rank)


# --- group_by_length -----------------------------------------------------------------------


def test_group_by_length_sorts_megabatches_longest_first() -> None:
    """Each megabatch is length-descending and the epoch's longest sample comes first."""
    lengths = [int(v) for v in np.random.default_rng(3).integers(1, 500, 1000)]
    order = list(LengthGroupedSampler(4, lengths=lengths, seed=1))
    assert lengths[order[0]] == max(lengths)
    megabatch = 50 * 4
    for start in range(0, len(order), megabatch):
        chunk = [lengths[i] for i in order[start : start + megabatch]]
        assert chunk[1:] == sorted(chunk[1:], reverse=True)


def test_group_by_length_order_is_a_function_of_seed_and_epoch() -> None:
    """The same (seed, epoch) gives the same order; another epoch gives another order."""
    lengths = list(range(1, 301))
    first, again = (
        LengthGroupedSampler(4, lengths=lengths, seed=9),
        LengthGroupedSampler(4, lengths=lengths, seed=9),
    )
    epoch_zero = list(first)
    assert list(again) == epoch_zero == list(first)
    first.set_epoch(1)
    assert list(first) != epoch_zero and sorted(first) == sorted(epoch_zero)


def test_group_by_length_ranks_split_the_epoch() -> None:
    """The ranks' shards are disjoint and together cover the dataset once."""
    lengths = list(range(1, 121))
    shards = [list(LengthGroupedSampler(4, lengths=lengths, num_replicas=3, rank=r)) for r in range(3)]
    assert sorted(itertools.chain(*shards)) == list(range(120))


def test_group_by_length_uses_the_dataset_length_column() -> None:
    """Given a dataset with a length column, the column is used instead of measuring input_ids."""
    dataset = datasets.Dataset.from_dict({"input_ids": [[1]] * 3, "length": [5, 50, 500]})
    assert LengthGroupedSampler(1, dataset=dataset).lengths == [5, 50, 500]


def test_group_by_length_accepts_tensor_lengths() -> None:
    """Precomputed lengths may be a tensor."""
    assert LengthGroupedSampler(2, lengths=torch.tensor([3, 1, 2])).lengths == [3, 1, 2]


def test_sharded_samplers_are_distributed_samplers() -> None:
    """Index samplers subclass DistributedSampler, so lightning.Trainer does not re-shard them."""
    assert isinstance(LengthGroupedSampler(2, lengths=[1, 2]), DistributedSampler)
    assert isinstance(ShardedSampler(2), DistributedSampler)


# --- batch_rebalance -----------------------------------------------------------------------


def rank_batches(lengths, world, ga=4, batch=8, seed=0, epoch=0, drop_last=False) -> list[list[list[int]]]:
    samplers = [
        BatchRebalanceSampler(lengths, batch, ga, num_replicas=world, rank=r, seed=seed, drop_last=drop_last)
        for r in range(world)
    ]
    for sampler in samplers:
        sampler.set_epoch(epoch)
    return [list(sampler) for sampler in samplers]


WORLDS = [1, 2]


@pytest.mark.parametrize("world", WORLDS)
def test_rebalance_micro_batch_sizes_vary(world: int) -> None:
    """Micro-batches of long samples hold fewer samples: the counts are not all batch_size."""
    sizes = Counter(len(b) for batches in rank_batches(bench_lengths(512), world) for b in batches)
    assert len(sizes) > 3 and min(sizes) < 8 < max(sizes)


@pytest.mark.parametrize("world", WORLDS)
def test_rebalance_step_total_is_constant(world: int) -> None:
    """Every optimizer step holds per_device × GA × world samples over all ranks."""
    per_rank = rank_batches(bench_lengths(512), world)
    steps = len(per_rank[0]) // 4
    totals = {sum(len(b) for batches in per_rank for b in batches[s * 4 : (s + 1) * 4]) for s in range(steps)}
    assert totals == {8 * 4 * world}


@pytest.mark.parametrize("world", WORLDS)
def test_rebalance_sees_every_sample_once_per_epoch(world: int) -> None:
    """Across ranks, each sample appears exactly once per epoch."""
    per_rank = rank_batches(bench_lengths(512), world)
    assert sorted(i for batches in per_rank for b in batches for i in b) == list(range(512))


@pytest.mark.parametrize("world", [2, 4])
def test_rebalance_balances_ranks_on_the_benchmark_distribution(world: int) -> None:
    """Per step, the costliest rank's padded tokens are within 5% of the mean."""
    lengths = bench_lengths()
    per_rank = rank_batches(lengths, world, seed=42)
    for step in range(len(per_rank[0]) // 4):
        totals = [sum(cost(b, lengths) for b in batches[step * 4 : (step + 1) * 4]) for batches in per_rank]
        assert max(totals) / np.mean(totals) <= 1.05


def test_rebalance_is_deterministic_per_epoch_and_changes_across_epochs() -> None:
    """The micro-batches depend only on (seed, epoch)."""
    lengths = bench_lengths(256)
    assert rank_batches(lengths, 2, seed=3) == rank_batches(lengths, 2, seed=3)
    assert rank_batches(lengths, 2, seed=3, epoch=1) != rank_batches(lengths, 2, seed=3)


@pytest.mark.parametrize(("drop_last", "expected_steps"), [(True, 3), (False, 4)])
def test_rebalance_tail_step(drop_last: bool, expected_steps: int) -> None:
    """A final partial step is yielded (padded to one sample per micro-batch) unless drop_last."""
    lengths = bench_lengths(32 * 3 + 3)
    sampler = BatchRebalanceSampler(lengths, 8, 4, num_replicas=1, rank=0, drop_last=drop_last)
    batches = list(sampler)
    assert len(batches) == len(sampler) == expected_steps * 4
    if not drop_last:
        assert all(len(b) >= 1 for b in batches[-4:]) and sum(len(b) for b in batches[-4:]) == 4


def test_rebalance_rejects_bad_batch_size() -> None:
    """A non-positive batch size names the argument."""
    with pytest.raises(ValueError, match=r"BatchRebalanceSampler\(batch_size=0\)"):
        BatchRebalanceSampler([1, 2], 0)


def _best_cap(lengths: list[int], groups: int) -> int:
    """Brute force: the smallest possible largest group cost over all contiguous cuts."""
    best = None
    for cuts in itertools.combinations(range(1, len(lengths)), groups - 1):
        bounds = [0, *cuts, len(lengths)]
        worst = max((b - a) * lengths[a] for a, b in itertools.pairwise(bounds))
        best = worst if best is None else min(best, worst)
    return best


@pytest.mark.parametrize("seed", range(6))
def test_min_max_partition_is_optimal(seed: int) -> None:
    """The cut's costliest group is as cheap as the best contiguous cut (brute force)."""
    rng = np.random.default_rng(seed)
    lengths = sorted((int(v) for v in rng.integers(1, 100, 11)), reverse=True)
    counts = min_max_partition(lengths, 4)
    assert len(counts) == 4 and sum(counts) == 11 and min(counts) >= 1
    starts = np.cumsum([0, *counts[:-1]])
    assert max(c * lengths[s] for c, s in zip(counts, starts)) == _best_cap(lengths, 4)


def test_assign_to_ranks_gives_each_rank_the_same_number_of_groups() -> None:
    """Every group goes to exactly one rank, each rank gets the same number, costliest first."""
    costs = [90, 10, 50, 50, 40, 60, 30, 70]
    ranks = assign_to_ranks(costs, 2)
    assert sorted(itertools.chain(*ranks)) == list(range(8)) and [len(r) for r in ranks] == [4, 4]
    totals = [sum(costs[g] for g in groups) for groups in ranks]
    assert max(totals) / np.mean(totals) <= 1.05
    assert all(costs[r[0]] == max(costs[g] for g in r) for r in ranks)


# --- factory ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("strategy", "kind"),
    [("random", ShardedSampler), ("sequential", ShardedSampler), ("group_by_length", LengthGroupedSampler)],
)
def test_build_train_sampler_index_strategies(strategy: str, kind: type) -> None:
    """Index strategies return a sampler and no batch sampler."""
    sampler, batch_sampler = build_train_sampler(strategy, [3, 1, 2, 5], batch_size=2, num_replicas=1, rank=0)
    assert isinstance(sampler, kind) and batch_sampler is None


def test_build_train_sampler_sequential_keeps_order() -> None:
    """ "sequential" yields the dataset order; a size is enough."""
    sampler, _ = build_train_sampler("sequential", 5, batch_size=2, num_replicas=1, rank=0)
    assert list(sampler) == [0, 1, 2, 3, 4]


def test_build_train_sampler_batch_rebalance() -> None:
    """ "batch_rebalance" returns a batch sampler with the step's settings."""
    sampler, batch_sampler = build_train_sampler(
        "batch_rebalance",
        [4] * 64,
        batch_size=4,
        gradient_accumulation_steps=2,
        num_replicas=2,
        rank=1,
        seed=7,
    )
    assert sampler is None and isinstance(batch_sampler, BatchRebalanceSampler)
    assert (batch_sampler.effective_batch_size, batch_sampler.rank, batch_sampler.seed) == (16, 1, 7)


def test_build_train_sampler_unknown_strategy_lists_choices() -> None:
    """An unknown strategy names the argument and every allowed value."""
    with pytest.raises(ValueError, match="train_sampling_strategy='longest'") as info:
        build_train_sampler("longest", [1], batch_size=1)
    assert all(repr(s) in str(info.value) for s in SAMPLING_STRATEGIES)


def test_build_train_sampler_length_strategies_need_lengths() -> None:
    """group_by_length and batch_rebalance refuse a bare dataset size."""
    with pytest.raises(ValueError, match="needs one length per sample"):
        build_train_sampler("group_by_length", 10, batch_size=2)


# --- with a plain lightning.Trainer ----------------------------------------------------------


class _Recorder:
    """A tiny LightningModule (built lazily so that importing this file stays cheap)."""

    @staticmethod
    def fit(loader: torch.utils.data.DataLoader, epochs: int = 2) -> list[list[list[int]]]:
        import lightning as L

        class Module(L.LightningModule):
            def __init__(self) -> None:
                super().__init__()
                self.layer = torch.nn.Linear(1, 1)
                self.seen: list[list[list[int]]] = []

            def on_train_epoch_start(self) -> None:
                self.seen.append([])

            def training_step(self, batch, batch_idx):
                self.seen[-1].append(batch["idx"].tolist())
                return self.layer(batch["x"].unsqueeze(-1)).sum()

            def configure_optimizers(self):
                return torch.optim.SGD(self.parameters(), lr=0.0)

        module = Module()
        trainer = L.Trainer(
            max_epochs=epochs, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
            enable_progress_bar=False, enable_model_summary=False,
        )  # fmt: skip
        trainer.fit(module, loader)
        return module.seen


def _dict_dataset(lengths: list[int]) -> list[dict]:
    return [{"x": torch.tensor(float(n)), "idx": i} for i, n in enumerate(lengths)]


def test_lightning_trainer_advances_the_rebalance_epoch() -> None:
    """A plain lightning.Trainer fed a BatchRebalanceSampler gets a new order each epoch."""
    lengths = bench_lengths(64)
    sampler = BatchRebalanceSampler(lengths, 4, 2, num_replicas=1, rank=0, seed=1)
    seen = _Recorder.fit(torch.utils.data.DataLoader(_dict_dataset(lengths), batch_sampler=sampler))
    expected = []
    for epoch in range(2):
        sampler.set_epoch(epoch)
        expected.append(list(sampler))
    assert seen == expected and seen[0] != seen[1]


def test_lightning_trainer_advances_the_length_grouped_epoch() -> None:
    """A plain lightning.Trainer calls set_epoch on LengthGroupedSampler too."""
    lengths = bench_lengths(64)
    sampler = LengthGroupedSampler(4, lengths=lengths, seed=1)
    seen = _Recorder.fit(torch.utils.data.DataLoader(_dict_dataset(lengths), sampler=sampler, batch_size=4))
    assert [sorted(itertools.chain(*epoch)) for epoch in seen] == [list(range(64))] * 2
    assert seen[0] != seen[1]


def test_rebalance_refuses_a_sampler_as_lengths() -> None:
    """Lightning re-instantiating the batch sampler with a sampler gets a clear error, not garbage."""
    with pytest.raises(ValueError, match="use_distributed_sampler=False"):
        BatchRebalanceSampler(DistributedSampler(range(4), 1, 0), batch_size=2)


def test_sampling_strategies_have_one_home():
    """The samplers' strategy list is the vocabulary's, as the argument table's carrier text."""
    from hf_lightning.adapters import samplers
    from hf_lightning.adapters.argument_table import ARGUMENT_TABLE
    from hf_lightning.args import enums

    assert samplers.SAMPLING_STRATEGIES is enums.SAMPLING_STRATEGIES
    assert ", ".join(enums.SAMPLING_STRATEGIES) in ARGUMENT_TABLE["train_sampling_strategy"].carrier
