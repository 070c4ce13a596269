"""What a transformers script observes at Trainer() and around train(): refusals, callback arguments,
model_init, special tokens, token counting and label smoothing, compared with transformers.Trainer."""

from __future__ import annotations

import copy
import warnings

import pytest
import torch
import transformers
from tokenizers import Tokenizer, models
from transformers import BertConfig, BertForSequenceClassification, PreTrainedTokenizerFast

import hf_lightning
from tests.parity._run import BASE_ARGS
from tests.tiny import RegressionModel, regression_data, tiny_gpt2

LIBS = {"hf": transformers, "ours": hf_lightning}


def _args(lib, tmp_path, **kwargs):
    return lib.TrainingArguments(output_dir=str(tmp_path), **{**BASE_ARGS, **kwargs})


def _outcome(fn):
    try:
        fn()
    except Exception as error:  # noqa: BLE001 - the type is what is compared
        return type(error)
    return None


def _metrics_without_compute_result(eval_pred):
    return {}


REFUSALS = {
    "save_strategy='best' without metric_for_best_model": (
        dict(save_strategy="best", eval_strategy="steps"),
        dict(eval_dataset=regression_data(8)),
    ),
    "batch_eval_metrics without compute_result": (
        dict(batch_eval_metrics=True),
        dict(compute_metrics=_metrics_without_compute_result),
    ),
    "eval_strategy without eval_dataset": (dict(eval_strategy="steps"), {}),
    "optimizers with optimizer_cls_and_kwargs": (
        {},
        dict(
            optimizers=(torch.optim.SGD(RegressionModel().parameters(), lr=0.1), None),
            optimizer_cls_and_kwargs=(torch.optim.SGD, {"lr": 0.1}),
        ),
    ),
    "model_init with optimizers": (
        {},
        dict(
            model_init=RegressionModel,
            optimizers=(torch.optim.SGD(RegressionModel().parameters(), lr=0.1), None),
        ),
    ),
}


@pytest.mark.parametrize("case", list(REFUSALS))
def test_trainer_refuses_what_transformers_refuses_with_the_same_exception(tmp_path, case):
    """Each refusal happens at Trainer(), with transformers' exception type."""
    arg_kwargs, trainer_kwargs = REFUSALS[case]
    outcomes = {}
    for name, lib in LIBS.items():
        kwargs = dict(trainer_kwargs)
        if "model_init" not in kwargs:
            kwargs["model"] = RegressionModel()
        outcomes[name] = _outcome(
            lambda lib=lib, kwargs=kwargs: lib.Trainer(args=_args(lib, tmp_path, **arg_kwargs), **kwargs)
        )
    assert outcomes["hf"] is not None and outcomes["ours"] is outcomes["hf"]


def _recorder(lib):
    class Recorder(lib.TrainerCallback):
        def __init__(self):
            self.kwargs, self.train_loaders = {}, []

    def record(event):
        def method(self, args, state, control, **kwargs):
            self.kwargs.setdefault(event, set(kwargs))
            if event == "on_step_end":
                self.train_loaders.append(kwargs["train_dataloader"])

        return method

    for event in hf_lightning.callbacks.TRAINER_EVENTS:
        if event not in ("on_init_end", "on_push_begin"):
            setattr(Recorder, event, record(event))
    return Recorder()


def test_every_event_gets_transformers_keyword_arguments(tmp_path):
    """For each event, the keyword names equal transformers'; train_dataloader is the training loader."""
    seen = {}
    for name, lib in LIBS.items():
        recorder = _recorder(lib)
        args = _args(lib, tmp_path / name, max_steps=4, logging_steps=2, eval_strategy="steps", eval_steps=2)
        trainer = lib.Trainer(
            RegressionModel(),
            args,
            train_dataset=regression_data(32),
            eval_dataset=regression_data(8),
            callbacks=[recorder],
        )
        trainer.train()
        trainer.predict(regression_data(8))
        seen[name] = recorder.kwargs
        assert recorder.train_loaders and all(loader is not None for loader in recorder.train_loaders)
        assert all(hasattr(loader, "__iter__") for loader in recorder.train_loaders)
    assert seen["ours"] == seen["hf"]


def test_model_init_builds_a_fresh_seeded_model_at_every_train(tmp_path):
    """Two train() calls with model_init start from the same seeded weights, as in transformers."""
    calls, starts = [], []

    def model_init():
        calls.append(1)
        model = RegressionModel(a=float(torch.randn(())), b=float(torch.randn(())))
        starts.append((float(model.a), float(model.b)))
        return model

    args = _args(hf_lightning, tmp_path, max_steps=2, seed=7)
    trainer = hf_lightning.Trainer(args=args, model_init=model_init, train_dataset=regression_data(16))
    trainer.train()
    first = [p.detach().clone() for p in trainer.model.parameters()]
    trainer.train()
    assert len(calls) == 3  # Trainer() and each train()
    assert starts[0] == starts[1] == starts[2]  # set_seed(args.seed) before each build
    for a, b in zip(first, trainer.model.parameters()):
        torch.testing.assert_close(a, b.detach())  # the second run started again from the seeded model


def _tokenizer():
    vocab = {f"t{i}": i for i in range(256)}
    return PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer(models.WordLevel(vocab, unk_token="t1")),
        bos_token="t0",
        eos_token="t0",
        pad_token="t2",
    )


def test_special_tokens_after_train_equal_transformers(tmp_path):
    """The model's config and generation config take the tokenizer's PAD/BOS/EOS ids in both libraries."""
    from transformers import GenerationConfig

    data = [
        {"input_ids": torch.randint(3, 256, (8,)), "labels": torch.randint(3, 256, (8,))} for _ in range(8)
    ]
    tokens = {}
    for name, lib in LIBS.items():
        model = tiny_gpt2()
        model.config.bos_token_id = model.config.eos_token_id = 50256
        model.generation_config = GenerationConfig.from_model_config(model.config)
        trainer = lib.Trainer(
            model, _args(lib, tmp_path / name, max_steps=1), train_dataset=data, processing_class=_tokenizer()
        )
        trainer.train()
        configs = (model.config, model.generation_config)
        tokens[name] = [getattr(c, f"{t}_token_id") for c in configs for t in ("bos", "eos", "pad")]
    assert tokens["ours"] == tokens["hf"]
    assert tokens["ours"][:3] == [0, 0, 2]  # the config no longer holds GPT-2's 50256


def test_non_padding_tokens_without_attention_mask_use_the_pad_token_id(tmp_path):
    """Without an attention mask, "non_padding" counts the ids that are not the tokenizer's pad id."""
    data = []
    for i in range(4):
        ids = torch.randint(3, 256, (6,))
        ids[6 - i % 3 :] = 2  # right padding with the pad id (2)
        data.append({"input_ids": ids, "labels": ids.clone()})
    seen = {}
    for name, lib in LIBS.items():
        args = _args(
            lib,
            tmp_path / name,
            max_steps=1,
            per_device_train_batch_size=4,
            include_num_input_tokens_seen="non_padding",
        )
        collator = lib.default_data_collator  # no attention mask in the batches
        trainer = lib.Trainer(
            tiny_gpt2(), args, train_dataset=data, processing_class=_tokenizer(), data_collator=collator
        )
        trainer.train()
        seen[name] = trainer.state.num_input_tokens_seen
    assert seen["ours"] == seen["hf"] < 24


def test_label_smoothing_with_a_multi_label_classifier_warns_and_is_off(tmp_path):
    """transformers' UserWarning, and ``trainer.label_smoother`` is None, for multi-label classification."""
    config = BertConfig(
        hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32, vocab_size=64
    )
    config.problem_type, config.num_labels = "multi_label_classification", 3
    messages = {}
    for name, lib in LIBS.items():
        model = BertForSequenceClassification(copy.deepcopy(config))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            trainer = lib.Trainer(model, _args(lib, tmp_path / name, label_smoothing_factor=0.1))
        assert trainer.label_smoother is None
        messages[name] = [
            str(w.message)
            for w in caught
            if issubclass(w.category, UserWarning) and "multi-label" in str(w.message)
        ]
    assert messages["ours"] == messages["hf"] and len(messages["ours"]) == 1
    smoothed = hf_lightning.Trainer(
        RegressionModel(), _args(hf_lightning, tmp_path / "s", label_smoothing_factor=0.1)
    )
    assert smoothed.label_smoother is not None and smoothed.label_smoother.epsilon == 0.1


@pytest.mark.parametrize("drop_last", [False, True])
def test_dataloaders_report_transformers_sizes(tmp_path, drop_last):
    """get_train/eval/test_dataloader: the same length and ``total_batch_size`` as transformers' prepared
    loaders (66 training rows in batches of 16, 74 evaluation rows in batches of 32)."""
    seen = {}
    for name, lib in LIBS.items():
        args = _args(
            lib,
            tmp_path / name,
            per_device_train_batch_size=16,
            per_device_eval_batch_size=32,
            dataloader_drop_last=drop_last,
        )
        trainer = lib.Trainer(
            RegressionModel(), args, train_dataset=regression_data(66), eval_dataset=regression_data(74)
        )
        loaders = [
            trainer.get_train_dataloader(),
            trainer.get_eval_dataloader(),
            trainer.get_test_dataloader(regression_data(128)),
        ]
        seen[name] = [(len(loader), loader.total_batch_size) for loader in loaders]
    assert seen["ours"] == seen["hf"]
    assert seen["ours"][0] == (4 if drop_last else 5, 16)
