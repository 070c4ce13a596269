"""``DataCollatorWithPadding`` and ``DefaultDataCollator`` are dataclasses as transformers' are: same fields, equality, ``dataclasses.replace``,
``repr``, and a ``@dataclass`` subclass adding a field pads as the base does."""

from __future__ import annotations

import dataclasses

import pytest

pytest.importorskip("transformers")

import transformers  # noqa: E402

import hf_lightning  # noqa: E402


@pytest.fixture(scope="module")
def tokenizer():
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel

    vocab = {"[PAD]": 0, "[UNK]": 1, **{f"w{i}": i + 2 for i in range(8)}}
    return transformers.PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer(WordLevel(vocab, unk_token="[UNK]")), pad_token="[PAD]", unk_token="[UNK]"
    )


FEATURES = [{"input_ids": [2, 3, 4], "label": 1}, {"input_ids": [5], "label": 0}]


def _observed(lib, tokenizer):
    collator = lib.DataCollatorWithPadding(tokenizer, pad_to_multiple_of=4)
    changed = dataclasses.replace(collator, padding="max_length", max_length=6)

    @dataclasses.dataclass
    class WithExtra(lib.DataCollatorWithPadding):
        extra: int = 0

        def __call__(self, features):
            batch = super().__call__(features)
            batch["extra"] = self.extra
            return batch

    sub = WithExtra(tokenizer, extra=7)
    return {
        "fields": [f.name for f in dataclasses.fields(collator)],
        "equal": collator == lib.DataCollatorWithPadding(tokenizer, pad_to_multiple_of=4),
        "repr": repr(collator).split("(", 1)[1],
        "replaced": {k: v.tolist() for k, v in changed(FEATURES).items()},
        "sub": {k: v if isinstance(v, int) else v.tolist() for k, v in sub(FEATURES).items()},
        "sub_fields": [f.name for f in dataclasses.fields(sub)],
    }


def test_padding_collator_is_the_same_dataclass(tokenizer):
    assert _observed(hf_lightning, tokenizer) == _observed(transformers, tokenizer)


def test_default_collator_is_the_same_dataclass():
    def observed(lib):
        collator = lib.DefaultDataCollator(return_tensors="np")
        return (
            [f.name for f in dataclasses.fields(collator)],
            collator == lib.DefaultDataCollator("np"),
            repr(collator).split("(", 1)[1],
            dataclasses.replace(collator, return_tensors="pt")([{"x": [1, 2], "label": 1}])[
                "labels"
            ].tolist(),
        )

    assert observed(hf_lightning) == observed(transformers)
