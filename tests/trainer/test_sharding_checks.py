"""What ``Trainer(...)`` refuses under FSDP and DeepSpeed at construction, and the FSDP warnings of
``TrainingArguments``, with transformers' types and words."""

from __future__ import annotations

import logging

import pytest
import torch

import hf_lightning
from tests.tiny import causal_lm_data, tiny_gpt2

BEST = {"load_best_model_at_end": True, "metric_for_best_model": "loss", "eval_strategy": "steps"}
CASES = {
    "fsdp_both_checkpointings": (
        {"fsdp": True, "fsdp_config": {"activation_checkpointing": True}, "activation_checkpointing": True},
        ValueError,
        "can't both be set to True",
    ),
    "fsdp_save_only_model_best": (
        {"fsdp": True, "save_only_model": True, **BEST},
        ValueError,
        "FSDP can't be used",
    ),
    "fsdp_save_only_model_sharded": (
        {"fsdp": True, "fsdp_config": {"state_dict_type": "SHARDED_STATE_DICT"}, "save_only_model": True},
        ValueError,
        "not compatible with FSDP state dict type 'SHARDED_STATE_DICT'",
    ),
    "deepspeed_save_only_model_best": (
        {"deepspeed": {"zero_optimization": {"stage": 2}}, "save_only_model": True, **BEST},
        ValueError,
        "DeepSpeed can't be used with `save_only_model`",
    ),
    "zero3_auto_find_batch_size": (
        {"deepspeed": {"zero_optimization": {"stage": 3}}, "auto_find_batch_size": True},
        ValueError,
        "isn't supported yet with DeepSpeed Zero-3",
    ),
}


def _trainer(library, tmp_path, **kwargs):  # type: ignore[no-untyped-def]
    args = library.TrainingArguments(str(tmp_path), use_cpu=True, report_to="none", **kwargs)
    data = causal_lm_data(n=4)
    return library.Trainer(model=tiny_gpt2(), args=args, train_dataset=data, eval_dataset=data)


@pytest.mark.parametrize("case", sorted(CASES))
def test_trainer_refuses_at_construction(tmp_path, case: str) -> None:
    """Each combination raises transformers' exception and words before any step."""
    kwargs, error, words = CASES[case]
    with pytest.raises(error, match=words):
        _trainer(hf_lightning, tmp_path, **kwargs)


def test_optimizers_are_refused_under_fsdp(tmp_path) -> None:
    """``optimizers=`` with FSDP: transformers' RuntimeError (subclass and override instead)."""
    model = tiny_gpt2()
    args = hf_lightning.TrainingArguments(str(tmp_path), use_cpu=True, report_to="none", fsdp=True)
    with pytest.raises(RuntimeError, match="Passing `optimizers` is not allowed if PyTorch FSDP is enabled"):
        hf_lightning.Trainer(
            model=model, args=args, optimizers=(torch.optim.SGD(model.parameters(), lr=0.1), None)
        )


TRANSFORMERS_WORDS = {  # transformers 5.24's Trainer.__init__, raised in one process too (checked by hand:
    # running its Trainer here would leave Accelerate's process-wide DeepSpeed state to the other tests)
    "deepspeed_save_only_model_best": "DeepSpeed can't be used with `save_only_model` along with `load_best_model_at_end`.",
    "zero3_auto_find_batch_size": "`auto_find_batch_size` isn't supported yet with DeepSpeed Zero-3. Please consider "
    "using Zero-2, Zero-1, or FSDP",
}


@pytest.mark.parametrize("case", sorted(TRANSFORMERS_WORDS))
def test_deepspeed_refusals_say_what_transformers_says(tmp_path, case: str) -> None:
    """The whole message is transformers' own."""
    kwargs, error, _ = CASES[case]
    with pytest.raises(error) as raised:
        _trainer(hf_lightning, tmp_path, **kwargs)
    assert str(raised.value) == TRANSFORMERS_WORDS[case]


def test_fsdp_warnings_as_transformers(tmp_path, caplog) -> None:
    """A string ``fsdp`` and the ``activation_checkpointing`` argument under FSDP warn as transformers warns."""
    with caplog.at_level(logging.WARNING):
        hf_lightning.TrainingArguments(str(tmp_path), fsdp="full_shard", activation_checkpointing=True)
    assert "Passing `fsdp` as a string is deprecated" in caplog.text
    assert "prefer `fsdp_config['activation_checkpointing']`" in caplog.text
