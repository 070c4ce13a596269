"""Implements ``TrainingArguments(train_sampling_strategy="batch_rebalance")``: :class:`BatchRebalanceSampler`.

For every optimizer step the sampler takes the step's effective batch (``batch_size ×
gradient_accumulation_steps × num_replicas`` samples of the epoch's shuffled order), sorts it by
length and cuts it into ``gradient_accumulation_steps × num_replicas`` micro-batches. The padded
cost of a micro-batch is ``n_samples × max_len``; the cuts minimise the most expensive micro-batch
(an exact min-max search over contiguous cuts), so micro-batches of long samples hold fewer samples
and ``batch_size`` is the average. The micro-batches are then dealt to ``(rank, micro-step)`` so
that every rank's total cost for the step is balanced, and this rank yields its own
``gradient_accumulation_steps`` micro-batches in order (the costliest first).

How it differs from transformers 5.24's ``BatchRebalanceSampler`` (same goal, different search):
transformers moves one sample at a time between groups (hill climbing on a cost with an extra
``0.001 × n × max_len²`` attention term) and deals the groups to ranks by cost rank. Ours finds the
optimal min-max cut for padded tokens directly, deals the micro-batches to ranks
longest-processing-time first with pairwise swaps, and then, never raising the optimal cap, moves
single samples across cut boundaries while that lowers the costliest rank's total (or, on one rank,
the padding). Its largest micro-batch is therefore never worse, and rank totals stay within a few
percent where transformers' drift by 5-15% (``benchmarks/bench_samplers.py`` measures both), so
the two samplers do not yield the same micro-batches.
Every rank runs the same deterministic computation from ``(seed, epoch)``: no communication.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence

import torch

from .samplers_common import as_length_list, resolve_replicas

__all__ = ["BatchRebalanceSampler", "assign_to_ranks", "balance_partition", "min_max_partition"]


def _greedy_counts(lengths: Sequence[int], cap: int) -> list[int] | None:
    """Fewest contiguous groups of the descending ``lengths`` with ``n × max_len <= cap`` each."""
    counts: list[int] = []
    start = 0
    while start < len(lengths):
        take = cap // lengths[start]
        if take < 1:
            return None
        take = min(take, len(lengths) - start)
        counts.append(take)
        start += take
    return counts


def _split_to(counts: list[int], num_groups: int) -> list[int]:
    """Split the largest groups until there are ``num_groups`` (a split never raises a cost)."""
    counts = list(counts)
    while len(counts) < num_groups:
        i = max(range(len(counts)), key=lambda j: counts[j])
        half = counts[i] // 2
        counts[i : i + 1] = [counts[i] - half, half]
    return counts


def min_max_partition(lengths: Sequence[int], num_groups: int) -> list[int]:
    """Return group sizes that cut the descending ``lengths`` into ``num_groups`` contiguous groups.

    The largest group cost ``n × max_len`` is the smallest possible among contiguous cuts: a binary
    search over the cap, each probe a greedy fill (which uses the fewest groups for that cap).
    """
    if len(lengths) < num_groups:
        raise ValueError(f"cannot cut {len(lengths)} samples into {num_groups} non-empty micro-batches")
    lengths = [max(1, int(v)) for v in lengths]
    low, high = lengths[0], lengths[0] * math.ceil(len(lengths) / num_groups)
    while low < high:
        mid = (low + high) // 2
        counts = _greedy_counts(lengths, mid)
        if counts is not None and len(counts) <= num_groups:
            high = mid
        else:
            low = mid + 1
    return _split_to(_greedy_counts(lengths, low) or [], num_groups)


def _swap_pass(costs: Sequence[int], ranks: list[list[int]]) -> bool:
    """Make the best swap between the costliest and the cheapest rank; say whether one was made."""
    totals = [sum(costs[g] for g in groups) for groups in ranks]
    hi = max(range(len(ranks)), key=lambda r: totals[r])
    lo = min(range(len(ranks)), key=lambda r: totals[r])
    gap = totals[hi] - totals[lo]
    best, best_pair = gap, None
    for a in ranks[hi]:
        for b in ranks[lo]:
            delta = costs[a] - costs[b]
            new_gap = abs(gap - 2 * delta)
            if 0 < delta < gap and new_gap < best:
                best, best_pair = new_gap, (a, b)
    if best_pair is None:
        return False
    a, b = best_pair
    ranks[hi][ranks[hi].index(a)] = b
    ranks[lo][ranks[lo].index(b)] = a
    return True


def assign_to_ranks(costs: Sequence[int], num_replicas: int) -> list[list[int]]:
    """Deal group indices to ``num_replicas`` ranks, the same number each, balancing cost totals.

    Longest-processing-time first (the costliest group to the cheapest rank with room), then
    pairwise swaps between the costliest and the cheapest rank while they narrow the gap. Each
    rank's list is ordered by cost, costliest first.
    """
    per_rank = len(costs) // num_replicas
    ranks: list[list[int]] = [[] for _ in range(num_replicas)]
    totals = [0] * num_replicas
    for group in sorted(range(len(costs)), key=lambda g: (-costs[g], g)):
        open_ranks = [r for r in range(num_replicas) if len(ranks[r]) < per_rank]
        r = min(open_ranks, key=lambda r: (totals[r], r))
        ranks[r].append(group)
        totals[r] += costs[group]
    for _ in range(4 * len(costs)):
        if num_replicas < 2 or not _swap_pass(costs, ranks):
            break
    return [sorted(groups, key=lambda g: (-costs[g], g)) for groups in ranks]


def _group_costs(lengths: Sequence[int], counts: Sequence[int]) -> list[int]:
    costs, start = [], 0
    for count in counts:
        costs.append(count * lengths[start])
        start += count
    return costs


def _best_boundary_move(
    lengths: Sequence[int], counts: list[int], owner: Sequence[int], cap: int, key: tuple[int, int]
) -> tuple[tuple[int, int], int, int] | None:
    """The move of one sample across one group boundary that most improves ``key``, if any."""
    costs = _group_costs(lengths, counts)
    totals = [0] * (max(owner) + 1)
    for group, cost in enumerate(costs):
        totals[owner[group]] += cost
    best, start = None, 0
    for b in range(len(counts) - 1):
        start += counts[b]  # index of the first sample of group b + 1
        for shift in (-1, 1):  # -1: last of b joins b + 1; +1: first of b + 1 joins b
            left, right = counts[b] + shift, counts[b + 1] - shift
            if left < 1 or right < 1:
                continue
            first_right = start + shift
            new_left = left * lengths[start - counts[b]]
            new_right = right * lengths[first_right]
            if max(new_left, new_right) > cap:
                continue
            new_totals = list(totals)
            new_totals[owner[b]] += new_left - costs[b]
            new_totals[owner[b + 1]] += new_right - costs[b + 1]
            candidate = (max(new_totals), sum(new_totals))
            if candidate < key and (best is None or candidate < best[0]):
                best = (candidate, b, shift)
    return best


def balance_partition(
    lengths: Sequence[int], num_groups: int, num_replicas: int
) -> tuple[list[int], list[list[int]]]:
    """Cut the descending ``lengths`` into groups and deal them to ranks.

    Returns ``(counts, ranks)``: the contiguous group sizes and, per rank, its group indices
    (costliest first). The cut starts at the min-max partition; then, keeping every group under
    that optimal cap, single samples move across group boundaries while that lowers the costliest
    rank's total (ties: the total padded cost), re-dealing the groups after each round.
    """
    lengths = [max(1, int(v)) for v in lengths]
    counts = min_max_partition(lengths, num_groups)
    cap = max(_group_costs(lengths, counts))
    ranks = assign_to_ranks(_group_costs(lengths, counts), num_replicas)
    for _ in range(8):
        owner = [0] * num_groups
        for r, groups in enumerate(ranks):
            for g in groups:
                owner[g] = r
        costs = _group_costs(lengths, counts)
        key = (max(sum(costs[g] for g in groups) for groups in ranks), sum(costs))
        moved = False
        for _ in range(len(lengths)):
            move = _best_boundary_move(lengths, counts, owner, cap, key)
            if move is None:
                break
            key, b, shift = move
            counts[b] += shift
            counts[b + 1] -= shift
            moved = True
        ranks = assign_to_ranks(_group_costs(lengths, counts), num_replicas)
        if not moved:
            break
    return counts, ranks


class _EpochHandle:
    """What ``BatchRebalanceSampler.sampler`` returns: Lightning calls ``set_epoch`` on it each epoch."""

    def __init__(self, owner: BatchRebalanceSampler) -> None:
        self._owner = owner

    def set_epoch(self, epoch: int) -> None:
        self._owner.set_epoch(epoch)


class BatchRebalanceSampler:
    """A batch sampler whose micro-batches balance padded-token cost within a step and across ranks.

    Args:
        lengths: one length per sample (a list, tensor or array; e.g. a precomputed ``length``
            column, or :func:`hf_lightning.data.collators.compute_lengths`).
        batch_size: the AVERAGE number of samples per micro-batch (``per_device_train_batch_size``).
        gradient_accumulation_steps: micro-batches per optimizer step on each rank.
        num_replicas, rank: the data-parallel world; default from ``torch.distributed`` when it is
            initialised, else 1 and 0.
        seed: the shuffle seed; the order is a pure function of ``(seed, epoch)``.
        shuffle: shuffle the samples each epoch (else take them in dataset order).
        drop_last: drop the final incomplete step; otherwise it is yielded too (padded by repeating
            samples from the start of the epoch when it holds fewer samples than micro-batches).

    Pass it as ``DataLoader(dataset, batch_sampler=sampler)``; it is already rank-aware, so a
    ``lightning.Trainer`` must not re-shard it: ``Trainer(use_distributed_sampler=False)``.
    """

    deals_processes = True  # the Trainer's loader is not dealt to the processes a second time

    def __init__(
        self,
        lengths: Sequence[int],
        batch_size: int,
        gradient_accumulation_steps: int = 1,
        *,
        num_replicas: int | None = None,
        rank: int | None = None,
        seed: int = 0,
        shuffle: bool = True,
        drop_last: bool = False,
    ) -> None:
        for name, value in (
            ("batch_size", batch_size),
            ("gradient_accumulation_steps", gradient_accumulation_steps),
        ):
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"`BatchRebalanceSampler({name}={value!r})` must be a positive integer")
        self.lengths = as_length_list(lengths, "BatchRebalanceSampler")
        self.num_replicas, self.rank = resolve_replicas(num_replicas, rank, "BatchRebalanceSampler")
        self.batch_size = batch_size
        self.gradient_accumulation_steps = gradient_accumulation_steps
        self.seed = seed
        self.shuffle = shuffle
        self.drop_last = drop_last
        self.epoch = 0

    @property
    def sampler(self) -> _EpochHandle:
        """A handle whose ``set_epoch`` sets this sampler's epoch (what ``lightning.Trainer`` calls)."""
        return _EpochHandle(self)

    @property
    def micro_batches_per_step(self) -> int:
        """Micro-batches in one optimizer step, over all ranks."""
        return self.gradient_accumulation_steps * self.num_replicas

    @property
    def effective_batch_size(self) -> int:
        """Samples in one optimizer step, over all ranks."""
        return self.batch_size * self.micro_batches_per_step

    @property
    def num_steps(self) -> int:
        """Optimizer steps in one epoch."""
        full, tail = divmod(len(self.lengths), self.effective_batch_size)
        return full + (1 if tail and not self.drop_last else 0)

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch whose order the next ``iter()`` yields."""
        self.epoch = epoch

    def __len__(self) -> int:
        return self.num_steps * self.gradient_accumulation_steps

    def epoch_order(self) -> list[int]:
        """The epoch's sample order before cutting: a permutation seeded by ``seed + epoch``."""
        if not self.shuffle:
            return list(range(len(self.lengths)))
        generator = torch.Generator().manual_seed(self.seed + self.epoch)
        return torch.randperm(len(self.lengths), generator=generator).tolist()

    def step_plan(self, indices: Sequence[int]) -> list[list[list[int]]]:
        """Cut one step's samples into micro-batches: ``plan[rank][micro_step] -> sample indices``."""
        ordered = sorted(indices, key=lambda i: (-self.lengths[i], i))
        counts, ranks = balance_partition(
            [self.lengths[i] for i in ordered], self.micro_batches_per_step, self.num_replicas
        )
        groups, start = [], 0
        for count in counts:
            groups.append(ordered[start : start + count])
            start += count
        return [[groups[g] for g in rank_groups] for rank_groups in ranks]

    def _step_indices(self, order: list[int], step: int) -> list[int]:
        size = self.effective_batch_size
        chunk = order[step * size : (step + 1) * size]
        missing = self.micro_batches_per_step - len(chunk)
        if missing > 0:
            chunk = chunk + (order * math.ceil(missing / len(order)))[:missing]
        return chunk

    def __iter__(self) -> Iterator[list[int]]:
        order = self.epoch_order()
        for step in range(self.num_steps):
            yield from self.step_plan(self._step_indices(order, step))[self.rank]
