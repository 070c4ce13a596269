"""Collators and dataset helpers: hf_lightning.data against transformers' behaviour."""

from __future__ import annotations

import logging
from dataclasses import dataclass

import datasets
import numpy as np
import pytest
import torch

from hf_lightning.data import (
    DataCollatorWithPadding,
    DefaultDataCollator,
    RemoveColumnsCollator,
    compute_lengths,
    default_data_collator,
    remove_unused_columns,
    signature_columns,
)


@dataclass
class _Feature:
    input_ids: list[int]
    label: int


FEATURE_TABLE = {
    "int label + id lists": [{"input_ids": [1, 2, 3], "label": 1}, {"input_ids": [4, 5, 6], "label": 0}],
    "float label": [{"x": [0.5, 1.0], "label": 0.25}, {"x": [1.5, 2.0], "label": 1.75}],
    "tensor label": [
        {"x": torch.ones(2), "label": torch.tensor(1)},
        {"x": torch.zeros(2), "label": torch.tensor(0)},
    ],
    "numpy int label": [{"x": [1], "label": np.int64(3)}, {"x": [2], "label": np.int64(4)}],
    "label_ids lists": [
        {"input_ids": [1, 2], "label_ids": [0, 1]},
        {"input_ids": [3, 4], "label_ids": [1, 1]},
    ],
    "float label_ids": [{"x": [1], "label_ids": [0.5, 0.1]}, {"x": [2], "label_ids": [0.2, 0.3]}],
    "tensor label_ids": [
        {"x": [1], "label_ids": torch.tensor([1, 2])},
        {"x": [2], "label_ids": torch.tensor([3, 4])},
    ],
    "numpy inputs": [
        {"pixel": np.ones((2, 2), dtype=np.float32)},
        {"pixel": np.zeros((2, 2), dtype=np.float32)},
    ],
    "tensor inputs": [{"input_ids": torch.tensor([1, 2])}, {"input_ids": torch.tensor([3, 4])}],
    "strings and None skipped": [
        {"input_ids": [1], "text": "a", "extra": None, "label": None},
        {"input_ids": [2], "text": "b", "extra": None, "label": None},
    ],
    "scalars": [{"score": 1.5, "flag": True}, {"score": 2.5, "flag": False}],
    "dataclass features": [_Feature([1, 2], 0), _Feature([3, 4], 1)],
}


def _assert_same_batch(ours: dict, theirs: dict) -> None:
    assert list(ours) == list(theirs)
    for key, value in theirs.items():
        assert type(ours[key]) is type(value), key
        assert ours[key].dtype == value.dtype, key
        np.testing.assert_array_equal(np.asarray(ours[key]), np.asarray(value))


# transformers' numpy path does not take torch tensors, so those rows run with "pt" only.
COLLATOR_CASES = [(n, rt) for n in FEATURE_TABLE for rt in ("pt", "np") if rt == "pt" or "tensor" not in n]


@pytest.mark.parametrize(("name", "return_tensors"), COLLATOR_CASES)
def test_default_data_collator_matches_transformers(name: str, return_tensors: str) -> None:
    """default_data_collator gives the keys, dtypes and values of transformers' collator."""
    from transformers import default_data_collator as hf_collator

    features = FEATURE_TABLE[name]
    _assert_same_batch(default_data_collator(features, return_tensors), hf_collator(features, return_tensors))


def test_default_data_collator_object_uses_its_return_tensors() -> None:
    """DefaultDataCollator("np") returns numpy arrays unless the call overrides it."""
    features = FEATURE_TABLE["int label + id lists"]
    assert isinstance(DefaultDataCollator("np")(features)["labels"], np.ndarray)
    assert isinstance(DefaultDataCollator("np")(features, return_tensors="pt")["labels"], torch.Tensor)


def test_default_data_collator_rejects_unknown_return_tensors() -> None:
    """An unsupported return_tensors value names the argument and the choices."""
    with pytest.raises(ValueError, match="return_tensors='tf'.*'pt', 'np'"):
        default_data_collator([{"x": [1]}], return_tensors="tf")


def _tokenizer():
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Whitespace
    from transformers import PreTrainedTokenizerFast

    vocab = {"[PAD]": 0, "[UNK]": 1, "a": 2, "b": 3, "c": 4}
    backend = Tokenizer(WordLevel(vocab, unk_token="[UNK]"))
    backend.pre_tokenizer = Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="[PAD]", unk_token="[UNK]")


PADDED_FEATURES = [
    {"input_ids": [2, 3, 4], "attention_mask": [1, 1, 1], "label": 1},
    {"input_ids": [2], "attention_mask": [1], "label": 0},
]


@pytest.mark.parametrize(
    "kwargs",
    [{}, {"pad_to_multiple_of": 4}, {"padding": "max_length", "max_length": 6}, {"return_tensors": "np"}],
)
def test_padding_collator_matches_transformers(kwargs: dict) -> None:
    """DataCollatorWithPadding pads like transformers' and renames label to labels."""
    from transformers import DataCollatorWithPadding as HFCollator

    tokenizer = _tokenizer()
    ours = DataCollatorWithPadding(tokenizer, **kwargs)(PADDED_FEATURES)
    theirs = HFCollator(tokenizer, **kwargs)(PADDED_FEATURES)
    assert sorted(ours) == sorted(theirs) and "labels" in ours
    for key in theirs:
        np.testing.assert_array_equal(np.asarray(ours[key]), np.asarray(theirs[key]))


def test_padding_collator_accepts_processing_class_keyword() -> None:
    """processing_class= is the keyword spelling of the tokenizer argument."""
    collator = DataCollatorWithPadding(processing_class=_tokenizer())
    assert collator(PADDED_FEATURES)["input_ids"].shape == (2, 3)


def test_padding_collator_needs_a_pad_method() -> None:
    """An object without pad() is rejected with the argument named."""
    with pytest.raises(ValueError, match="needs an object with a `pad` method"):
        DataCollatorWithPadding(tokenizer=object())


class _Model(torch.nn.Module):
    def forward(self, input_ids, attention_mask=None, labels=None):  # noqa: D401 - test double
        return input_ids


class _Peft(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inner = _Model()

    def get_base_model(self) -> torch.nn.Module:
        return self.inner

    def forward(self, *args, **kwargs):
        return self.inner(*args, **kwargs)


@pytest.mark.parametrize("model", [_Model(), _Peft()], ids=["plain", "peft-like"])
def test_signature_columns_lists_forward_arguments_and_labels(model: torch.nn.Module) -> None:
    """signature_columns lists forward's parameters (through a PEFT wrapper) plus label names."""
    columns = signature_columns(model, label_names=["start_positions"])
    assert columns == ["input_ids", "attention_mask", "labels", "label", "label_ids", "start_positions"]


def _dataset():
    return datasets.Dataset.from_dict(
        {
            "input_ids": [[1, 2, 3], [4, 5], [6]],
            "length": [30, 20, 10],
            "text": ["abc", "de", "f"],
            "source": ["x", "y", "z"],
            "label": [0, 1, 0],
        }
    )


def test_remove_unused_columns_drops_and_logs_extra_columns(caplog: pytest.LogCaptureFixture) -> None:
    """Columns forward does not take are dropped and named in one log line; labels are kept."""
    with caplog.at_level(logging.INFO, logger="hf_lightning.data"):
        kept = remove_unused_columns(
            _dataset(), signature_columns(_Model()), description="training", model_name="_Model"
        )
    assert kept.column_names == ["input_ids", "label"]
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 1
    assert "training set" in messages[0] and "length, text, source" in messages[0] and "_Model" in messages[0]


def test_remove_unused_columns_keeps_label_names() -> None:
    """Columns listed in label_names survive even when forward does not name them."""
    kept = remove_unused_columns(_dataset(), ["input_ids"], label_names=["source"])
    assert kept.column_names == ["input_ids", "source", "label"]


def test_remove_unused_columns_without_any_match_raises() -> None:
    """A dataset sharing no column with forward raises, suggesting remove_unused_columns=False."""
    dataset = datasets.Dataset.from_dict({"text": ["a"]})
    with pytest.raises(ValueError, match="remove_unused_columns=False"):
        remove_unused_columns(dataset, ["input_ids"])


def test_remove_unused_columns_leaves_torch_datasets_alone() -> None:
    """A dataset without column_names is returned as is (its collator does the removal)."""
    data = [{"input_ids": [1], "text": "a"}]
    assert remove_unused_columns(data, ["input_ids"]) is data


def test_length_column_is_read_before_it_is_dropped() -> None:
    """docs/divergences.md divergence 2: the precomputed length column is used, not a re-scan, then dropped."""
    dataset = _dataset()
    lengths = compute_lengths(dataset, "length")
    kept = remove_unused_columns(dataset, ["input_ids"])
    assert lengths == [30, 20, 10]  # the column's values, not len(input_ids)
    assert "length" not in kept.column_names


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (datasets.Dataset.from_dict({"input_ids": [[1, 2], [3]]}), [2, 1]),
        ([{"input_ids": [1, 2, 3]}, {"input_ids": [4]}], [3, 1]),
        ([{"input_ids": [1, 2, 3], "length": 7}], [7]),
        (datasets.Dataset.from_dict({"input_ids": [[1]], "n": [5]}).rename_column("n", "length"), [5]),
    ],
    ids=["datasets-scan", "dicts-scan", "dicts-length-key", "datasets-column"],
)
def test_compute_lengths_sources(data, expected: list[int]) -> None:
    """compute_lengths uses a length column or key when present, else measures input_ids."""
    assert compute_lengths(data) == expected


def test_compute_lengths_custom_model_input_name() -> None:
    """model_input_name selects which key is measured."""
    assert compute_lengths([{"pixel_values": [0] * 4}], model_input_name="pixel_values") == [4]


def test_compute_lengths_rejects_items_it_cannot_measure() -> None:
    """Items that are not dicts with the input key raise, naming the key."""
    with pytest.raises(ValueError, match="'input_ids'"):
        compute_lengths([torch.zeros(3)])


def test_remove_columns_collator_filters_and_logs_once(caplog: pytest.LogCaptureFixture) -> None:
    """RemoveColumnsCollator keeps forward's inputs and logs the dropped keys once."""
    collator = RemoveColumnsCollator(default_data_collator, ["input_ids", "label"], model_name="M")
    features = [
        {"input_ids": [1, 2], "text": "a", "label": 1},
        {"input_ids": [3, 4], "text": "b", "label": 0},
    ]
    with caplog.at_level(logging.INFO, logger="hf_lightning.data"):
        batch = collator(features)
        collator(features)
    assert sorted(batch) == ["input_ids", "labels"]
    assert len(caplog.records) == 1 and "text" in caplog.records[0].getMessage()


def test_remove_columns_collator_hands_the_collator_copies() -> None:
    """The wrapped collator gets new dicts, whether or not a column was dropped: a collator that
    pops keys (as label-renaming ones do) leaves the dataset's rows intact."""

    def popping_collator(features):
        return {"label": [f.pop("label") for f in features]}

    rows = [{"input_ids": [1], "label": 1}, {"input_ids": [2], "label": 0, "text": "t"}]
    collator = RemoveColumnsCollator(popping_collator, ["input_ids", "label"])
    assert collator(rows) == {"label": [1, 0]}
    assert rows == [{"input_ids": [1], "label": 1}, {"input_ids": [2], "label": 0, "text": "t"}]
