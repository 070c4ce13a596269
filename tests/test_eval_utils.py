"""The engine-free pieces of evaluation: nested concatenation with -100 padding, accumulation, sharding."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from hf_lightning.adapters.evaluation import EvalShardSampler
from hf_lightning.eval_utils import (
    EvalAccumulator,
    concat_batches,
    lookahead,
    mean_eval_loss,
    nested_concat,
    pad_and_concatenate,
    prefix_metric_keys,
)


@pytest.mark.parametrize("kind", ["torch", "numpy"])
def test_pad_and_concatenate_pads_second_axis_with_minus_100(kind):
    """Batches of different sequence lengths are joined, the shorter padded on the right with -100."""
    first, second = np.ones((2, 3)), np.full((1, 5), 2.0)
    if kind == "torch":
        first, second = torch.from_numpy(first), torch.from_numpy(second)
    result = np.asarray(pad_and_concatenate(first, second))
    expected = np.array([[1, 1, 1, -100, -100], [1, 1, 1, -100, -100], [2, 2, 2, 2, 2]], dtype=float)
    np.testing.assert_array_equal(result, expected)


def test_nested_concat_follows_tuples_and_dicts():
    """Tuples and dicts are concatenated leaf by leaf."""
    a = (torch.zeros(1, 2), {"x": torch.zeros(1)})
    b = (torch.ones(2, 2), {"x": torch.ones(2)})
    out = nested_concat(a, b)
    assert out[0].shape == (3, 2) and out[1]["x"].tolist() == [0, 1, 1]


def test_nested_concat_rejects_changing_structure():
    """A batch whose outputs change structure raises a TypeError naming both types."""
    with pytest.raises(TypeError, match="tuple then list"):
        nested_concat((torch.zeros(1),), [torch.zeros(1)])


def test_accumulator_without_concat_keeps_one_entry_per_batch():
    """eval_do_concat_batches=False: a list of per-batch arrays."""
    acc = EvalAccumulator(do_concat=False)
    acc.add(torch.zeros(2, 3))
    acc.to_cpu_and_numpy()
    acc.add(torch.zeros(1, 4))
    arrays = acc.get_arrays()
    assert [a.shape for a in arrays] == [(2, 3), (1, 4)]


@pytest.mark.parametrize(
    ("losses", "nan_filter", "expected"),
    [
        ([1.0, 3.0], True, 2.0),
        ([1.0, np.nan, 3.0], True, 2.0),
        ([np.inf, np.inf], True, np.inf),
        (None, True, None),
    ],
)
def test_mean_eval_loss(losses, nan_filter, expected):
    """The mean over samples, leaving out non-finite values when filtering (unless all are)."""
    value = mean_eval_loss(None if losses is None else np.array(losses), nan_filter)
    assert value == expected


def test_mean_eval_loss_keeps_nan_without_filter():
    """Without logging_nan_inf_filter a NaN loss makes the mean NaN."""
    assert math.isnan(mean_eval_loss(np.array([1.0, np.nan]), False))


@pytest.mark.parametrize(
    ("items", "expected"), [([], []), ([1], [(True, 1)]), ([1, 2], [(False, 1), (True, 2)])]
)
def test_lookahead_marks_the_last_item(items, expected):
    """lookahead yields (is_last, item)."""
    assert list(lookahead(items)) == expected


def test_prefix_metric_keys_keeps_prefixed_keys():
    """Keys already prefixed are kept; others get the prefix."""
    assert prefix_metric_keys({"eval_loss": 1, "acc": 2}, "eval") == {"eval_loss": 1, "eval_acc": 2}


@pytest.mark.parametrize(("size", "batch", "world"), [(7, 2, 2), (9, 3, 2), (5, 4, 2), (10, 1, 3), (2, 4, 3)])
def test_shard_sampler_deals_whole_batches_in_order(size, batch, world):
    """Rank batches interleaved in rank order give the dataset in order, then repeats that real_rows drops."""
    samplers = [EvalShardSampler(size, batch, world, rank) for rank in range(world)]
    assert len({len(s) for s in samplers}) == 1
    per_rank = [list(s) for s in samplers]
    order: list[int] = []
    for step in range(len(samplers[0])):
        chunk = [i for rank in range(world) for i in per_rank[rank][step]]
        assert all(len(b[step]) == batch for b in per_rank)
        order += chunk[: samplers[0].real_rows(step)]
    assert order == list(range(size))


def test_shard_sampler_drop_last_keeps_complete_rounds():
    """With drop_last only complete rounds of full batches are dealt, nothing repeated."""
    sampler = EvalShardSampler(9, 2, 2, 1, drop_last=True)
    assert list(sampler) == [[2, 3], [6, 7]]


@pytest.mark.parametrize(
    "batches",
    [
        [np.zeros((2, 3)), np.ones((1, 5)), np.full((2, 4), 2.0)],
        [np.zeros(2), np.ones(3)],
        [np.array(1.5), np.array(2.5)],
        [(np.zeros((1, 2)), {"x": np.ones((1, 1, 2))}), (np.ones((2, 3)), {"x": np.ones((2, 2, 2))})],
        [torch.zeros(2, 3, dtype=torch.long), torch.ones(1, 4, dtype=torch.long)],
        [(np.zeros((3, 2)), (np.zeros(1),) * 3), (np.ones((2, 2)), (np.ones(1),) * 2)],
        [np.array(1.5)],
        [(np.array(0.25), np.zeros((2, 3)))],
        [torch.tensor(0.5)],
    ],
    ids=[
        "ragged",
        "1d",
        "scalars",
        "nested",
        "torch",
        "list-per-sample",
        "one-scalar",
        "one-nested",
        "one-torch",
    ],
)
def test_concat_batches_equals_concatenating_one_by_one(batches):
    """Concatenating all batches at once (even consuming the list) equals transformers' batch-by-batch way."""
    expected = batches[0]
    for batch in batches[1:]:
        expected = nested_concat(expected, batch)
    result = concat_batches(list(batches), consume=True)
    flat_expected, flat_result = _leaves(expected), _leaves(result)
    assert len(flat_expected) == len(flat_result)
    for want, got in zip(flat_expected, flat_result):
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
        assert np.asarray(got).dtype == np.asarray(want).dtype
        assert np.shape(got) == np.shape(want)  # a lone 0-d batch stays 0-d, as transformers keeps it


def _leaves(value):
    if isinstance(value, (list, tuple)):
        return [leaf for item in value for leaf in _leaves(item)]
    if isinstance(value, dict):
        return [leaf for item in value.values() for leaf in _leaves(item)]
    return [value]
