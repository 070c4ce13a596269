"""Values transformers 5.24 accepts and then misbehaves with raise a ValueError naming the field and the
allowed values (docs/divergences.md, "Loud, early, never silent"); transformers' own meanings stay."""

from __future__ import annotations

import pytest
import transformers

import hf_lightning

# (arguments, what transformers 5.24 does with them on the same script: measured, see each comment)
IMPOSSIBLE = [
    (dict(max_steps=-5), r"max_steps=-5\)` must be an int > 0, or -1"),  # trains by epochs instead
    (dict(max_steps=0), r"max_steps=0\)` must be an int > 0, or -1"),  # trains one step
    (dict(save_total_limit=-1), r"save_total_limit=-1\)` must be None .* or an int >= 0"),  # keeps all
    (dict(save_steps=0), r"save_steps=0\)` needs `save_steps` > 0"),  # saves at the end only
    (dict(max_grad_norm=float("inf")), r"max_grad_norm=inf\)` must be a finite number"),  # inf norm -> NaN
    (dict(max_grad_norm=float("nan")), r"max_grad_norm=nan\)` must be a finite number"),  # never clips
    (dict(label_smoothing_factor=1.5), r"label_smoothing_factor=1.5\)` must be in \[0, 1\]"),
    (dict(neftune_noise_alpha=-1.0), r"neftune_noise_alpha=-1.0\)` must be a number > 0, or None"),
    (dict(ddp_timeout=0), r"ddp_timeout=0\)` must be a number of seconds > 0"),
]


@pytest.mark.parametrize(("kwargs", "match"), IMPOSSIBLE, ids=[str(k) for k, _ in IMPOSSIBLE])
def test_impossible_value_raises_naming_the_field_and_the_allowed_values(tmp_path, kwargs, match):
    """Each value raises ValueError at TrainingArguments(); transformers constructs it without a word."""
    transformers.TrainingArguments(output_dir=str(tmp_path), **kwargs)  # parity: accepted there
    with pytest.raises(ValueError, match=match):
        hf_lightning.TrainingArguments(output_dir=str(tmp_path), **kwargs)


def test_every_impossible_value_is_reported_in_one_error(tmp_path):
    """Several impossible values: one ValueError listing each field."""
    with pytest.raises(ValueError, match="3 problems") as caught:
        hf_lightning.TrainingArguments(
            output_dir=str(tmp_path), max_steps=-5, save_total_limit=-1, max_grad_norm=float("inf")
        )
    for name in ("max_steps=-5", "save_total_limit=-1", "max_grad_norm=inf"):
        assert name in str(caught.value)


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(max_steps=-1),  # unset: the epochs decide
        dict(save_total_limit=None),  # unlimited
        dict(save_total_limit=0),  # transformers' rotation skips it: every checkpoint stays
        dict(save_strategy="no", save_steps=0),  # no steps strategy: save_steps is not read
        dict(save_strategy="steps", save_steps=0.25),  # a ratio of the total steps
        dict(max_grad_norm=0.0),  # clipping disabled
        dict(max_grad_norm=-1.0),  # <= 0: disabled, as in transformers
        dict(max_grad_norm=1e9),  # the gradient norm logged, nothing clipped
        dict(label_smoothing_factor=1.0),
        dict(neftune_noise_alpha=None),
    ],
)
def test_transformers_meanings_stay_accepted(tmp_path, kwargs):
    """The values transformers gives a meaning to construct as they do there."""
    ours = hf_lightning.TrainingArguments(output_dir=str(tmp_path), **kwargs)
    theirs = transformers.TrainingArguments(output_dir=str(tmp_path), **kwargs)
    for name in kwargs:
        assert getattr(ours, name) == getattr(theirs, name)
