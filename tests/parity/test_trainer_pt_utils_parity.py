"""``hf_lightning.trainer_pt_utils`` gives what ``transformers.trainer_pt_utils`` gives for the same call."""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("transformers")

import transformers.trainer_pt_utils as theirs  # noqa: E402

import hf_lightning.trainer_pt_utils as ours  # noqa: E402


def test_length_grouped_indices_and_sampler_orders_are_transformers():
    lengths = [int(n) for n in torch.randint(1, 200, (333,), generator=torch.Generator().manual_seed(0))]
    for batch_size, mult in ((4, None), (8, 3), (64, None)):
        assert ours.get_length_grouped_indices(
            lengths, batch_size, mult, generator=torch.Generator().manual_seed(1)
        ) == theirs.get_length_grouped_indices(
            lengths, batch_size, mult, generator=torch.Generator().manual_seed(1)
        )
    ours_order = list(
        ours.LengthGroupedSampler(4, lengths=lengths, generator=torch.Generator().manual_seed(2))
    )
    their_order = list(
        theirs.LengthGroupedSampler(4, lengths=lengths, generator=torch.Generator().manual_seed(2))
    )
    assert ours_order == their_order


@pytest.mark.parametrize("shift_labels", [False, True])
def test_label_smoother_gives_transformers_loss(shift_labels):
    generator = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 6, 11, generator=generator)
    labels = torch.randint(0, 11, (3, 6), generator=generator)
    labels[0, :2] = -100
    expected = theirs.LabelSmoother(epsilon=0.2)({"logits": logits}, labels, shift_labels=shift_labels)
    got = ours.LabelSmoother(epsilon=0.2)({"logits": logits}, labels, shift_labels=shift_labels)
    torch.testing.assert_close(got, expected)


def test_nested_helpers_give_transformers_results():
    first = (torch.ones(2, 3), {"a": torch.arange(4).view(2, 2)})
    second = (torch.zeros(1, 5), {"a": torch.arange(2).view(1, 2)})
    for got, expected in (
        (
            ours.nested_concat(first, second, padding_index=-7),
            theirs.nested_concat(first, second, padding_index=-7),
        ),
        (ours.nested_detach(first), theirs.nested_detach(first)),
    ):
        torch.testing.assert_close(got, expected)
    assert ours.find_batch_size(first) == theirs.find_batch_size(first) == 2
    arrays = ours.nested_numpify(first)
    np.testing.assert_array_equal(arrays[1]["a"], theirs.nested_numpify(first)[1]["a"])
    truncated = ours.nested_truncate(arrays, 1)
    np.testing.assert_array_equal(truncated[0], theirs.nested_truncate(arrays, 1)[0])
