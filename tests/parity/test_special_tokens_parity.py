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


def test_train_aligns_before_the_data_and_the_checkpoint_are_logged(tmp_path):
    """``train()`` warns of the updated ids before it logs the checkpoint it loads and the ignored dataset columns,
    in transformers' order (the alignment is the first thing ``train()`` does with the model)."""
    import io

    import torch
    import transformers
    from datasets import Dataset

    import hf_lightning

    data = Dataset.from_dict(
        {"input_ids": [[3, 4, 3, 4]] * 8, "labels": [[3, 4, 3, 4]] * 8, "text": ["a"] * 8}
    )
    marks = {
        "PAD/BOS/EOS": "aligned",
        "columns in the Training set": "columns",
        "Loading model from": "loaded",
    }
    orders = []
    for library in (transformers, hf_lightning):
        args = dict(use_cpu=True, report_to="none", disable_tqdm=True, per_device_train_batch_size=4)
        out = tmp_path / library.__name__
        library.Trainer(
            model=_model(), args=library.TrainingArguments(str(out), max_steps=1, **args), train_dataset=data
        ).train()  # checkpoint-1, from a model whose ids the tokenizer then changes
        stream = io.StringIO()
        handler = logging.StreamHandler(stream)
        loggers = [logging.getLogger(name) for name in ("transformers", "hf_lightning")]
        saved = [(logger.level, logger.handlers[:]) for logger in loggers]
        for logger in loggers:
            logger.addHandler(handler)
            logger.setLevel(logging.INFO)
        try:
            torch.manual_seed(0)
            library.Trainer(
                model=_model(bos_token_id=50256, eos_token_id=50256),
                args=library.TrainingArguments(str(out), max_steps=2, **args),
                train_dataset=data,
                processing_class=_tokenizer(bos_token="<s>", eos_token="</s>", pad_token="<pad>"),
            ).train(resume_from_checkpoint=str(out / "checkpoint-1"))
        finally:
            for logger, (level, handlers) in zip(loggers, saved):
                logger.setLevel(level)
                logger.handlers[:] = handlers
        lines = stream.getvalue().splitlines()
        orders.append(list(dict.fromkeys(v for line in lines for k, v in marks.items() if k in line)))
    assert orders[0] == ["aligned", "loaded", "columns"]
    assert orders[1] == orders[0]
