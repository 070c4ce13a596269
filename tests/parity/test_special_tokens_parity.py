"""Special-token alignment before training equals transformers' ``align_special_tokens``."""

from __future__ import annotations

import copy
import logging

import pytest
from tokenizers import Tokenizer, models
from transformers import GenerationConfig, GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast
from transformers.trainer_utils import align_special_tokens as theirs

from hf_lightning.special_tokens import align_special_tokens as ours


def _tokenizer(**special):
    vocab = {"<s>": 0, "<pad>": 1, "</s>": 2, "a": 3, "b": 4}
    return PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer(models.WordLevel(vocab, unk_token="a")), **special
    )


def _model(**config):
    model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=8, n_head=2, vocab_size=5, n_positions=8, **config))
    model.generation_config = GenerationConfig.from_model_config(model.config)
    return model


CASES = {
    "gpt2 ids replaced by the tokenizer's": (
        dict(bos_token_id=50256, eos_token_id=50256),
        dict(bos_token="<s>", eos_token="</s>"),
    ),
    "pad added": (dict(), dict(pad_token="<pad>")),
    "eos list keeps its ids": (dict(eos_token_id=[4, 3]), dict(eos_token="</s>")),
    "already aligned": (dict(bos_token_id=0, eos_token_id=2), dict(bos_token="<s>", eos_token="</s>")),
    "tokenizer defines nothing": (dict(bos_token_id=7, eos_token_id=7), dict()),
}


@pytest.mark.parametrize("case", list(CASES))
def test_config_and_generation_config_equal_transformers(case):
    """After alignment, config and generation config hold the ids transformers would give them."""
    config, special = CASES[case]
    model, tokenizer = _model(**config), _tokenizer(**special)
    reference = copy.deepcopy(model)
    ours(model, tokenizer)
    theirs(reference, tokenizer)
    for name in ("bos_token_id", "eos_token_id", "pad_token_id"):
        assert getattr(model.config, name) == getattr(reference.config, name), name
        assert getattr(model.generation_config, name) == getattr(reference.generation_config, name), name


def test_one_warning_names_the_updated_tokens(caplog):
    """A change is logged once, with the updated ids; nothing is logged when the ids already agree."""
    model = _model(bos_token_id=50256, eos_token_id=50256)
    with caplog.at_level(logging.WARNING):
        updated = ours(model, _tokenizer(bos_token="<s>", eos_token="</s>"))
        ours(model, _tokenizer(bos_token="<s>", eos_token="</s>"))
    assert updated == {"eos_token_id": 2, "bos_token_id": 0}
    messages = [r.getMessage() for r in caplog.records if "PAD/BOS/EOS" in r.getMessage()]
    assert len(messages) == 1 and "{'eos_token_id': 2, 'bos_token_id': 0}" in messages[0]


def test_a_processing_class_without_token_ids_changes_nothing():
    """An image processor or ``None`` leaves the configs alone."""
    model = _model(bos_token_id=50256, eos_token_id=50256)
    assert ours(model, None) == {} and ours(model, object()) == {}
    assert model.config.eos_token_id == 50256
