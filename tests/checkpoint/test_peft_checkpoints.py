"""PEFT adapters as a first-class model: a ``PeftModel``'s checkpoints (adapter files only) are recognised by every
check, resume bit-identically, load as the best model, and load back with ``PeftModel.from_pretrained``."""

from __future__ import annotations

import os

import pytest
import torch

from hf_lightning import Trainer, TrainingArguments
from hf_lightning.checkpoint import CheckpointError, is_checkpoint_complete, load_model_weights
from hf_lightning.checkpoint.folders import checkpoint_problem
from hf_lightning.trainer_utils import get_last_checkpoint
from tests.tiny import StopAt
from tests.tiny_loading import PEFT_KINDS, peft_data, peft_model, tiny_bert_classifier, tiny_llama

ADAPTER_FILES = {"adapter_model.safetensors", "adapter_config.json"}


def _base(kind: str, seed: int = 0) -> torch.nn.Module:
    return tiny_bert_classifier(seed) if kind == "lora_bert" else tiny_llama(seed)


def _state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {name: value.detach().clone() for name, value in model.state_dict().items()}


def _assert_same(model: torch.nn.Module, expected: dict[str, torch.Tensor]) -> None:
    actual = model.state_dict()
    assert actual.keys() == expected.keys()
    for name, value in expected.items():
        assert torch.equal(actual[name], value), name


def _reference(kind: str, folder) -> dict[str, torch.Tensor]:
    """What ``PeftModel.from_pretrained`` loads from ``folder`` onto the same base."""
    from peft import PeftModel

    return _state(PeftModel.from_pretrained(_base(kind), folder))


def _args(tmp_path, name: str, **overrides) -> TrainingArguments:
    settings = dict(
        output_dir=str(tmp_path / name),
        use_cpu=True,
        report_to="none",
        disable_tqdm=True,
        seed=0,
        per_device_train_batch_size=4,
        learning_rate=1e-2,
        max_steps=6,
        save_steps=2,
        logging_steps=2,
    )
    return TrainingArguments(**{**settings, **overrides})


def _trainer(kind: str, args: TrainingArguments, **kwargs) -> Trainer:
    return Trainer(model=peft_model(kind), args=args, train_dataset=peft_data(kind), **kwargs)


@pytest.mark.parametrize("kind", PEFT_KINDS)
def test_adapter_folder_loads_as_peft_from_pretrained(tmp_path, kind):
    """A fresh PeftModel loaded from a saved adapter folder equals ``PeftModel.from_pretrained``, tensor for tensor."""
    trained = peft_model(kind, seed=1)
    for param in trained.parameters():
        if param.requires_grad:
            param.data.add_(0.5)  # away from the initial values (LoRA's B starts at zero)
    trained.save_pretrained(tmp_path)
    model = peft_model(kind, seed=2)
    result = load_model_weights(model, tmp_path)
    assert (result.missing_keys, result.unexpected_keys) == ([], [])
    _assert_same(model, _reference(kind, tmp_path))
    _assert_same(model, _state(trained))


def test_every_adapter_of_the_model_is_loaded(tmp_path):
    """A second adapter is saved in its own subfolder; both come back."""
    import peft

    trained = peft_model("lora", seed=1)
    trained.add_adapter("other", peft.LoraConfig(r=2, target_modules=["k_proj"], task_type="CAUSAL_LM"))
    for name, param in trained.named_parameters():
        if "lora_" in name:
            param.data.add_(0.25)
    trained.save_pretrained(tmp_path)
    assert os.path.isfile(tmp_path / "other" / "adapter_model.safetensors")
    model = peft_model("lora", seed=2)
    model.add_adapter("other", peft.LoraConfig(r=2, target_modules=["k_proj"], task_type="CAUSAL_LM"))
    load_model_weights(model, tmp_path)
    _assert_same(model, _state(trained))


def test_adapter_of_another_rank_is_refused_and_nothing_changes(tmp_path):
    """LoRA r=4 weights into an r=8 adapter: refused naming the shapes; the model is as it was."""
    import peft

    peft_model("lora", seed=1).save_pretrained(tmp_path)
    model = peft.get_peft_model(tiny_llama(), peft.LoraConfig(r=8, target_modules=["q_proj", "v_proj"]))
    before = _state(model)
    with pytest.raises(CheckpointError, match="other shapes.*lora_A"):
        load_model_weights(model, tmp_path)
    _assert_same(model, before)


def test_adapter_on_other_modules_is_refused_naming_the_keys(tmp_path):
    """An adapter on q_proj/v_proj into one on k_proj: missing and unexpected keys named, nothing loaded."""
    import peft

    peft_model("lora", seed=1).save_pretrained(tmp_path)
    model = peft.get_peft_model(tiny_llama(), peft.LoraConfig(r=4, target_modules=["k_proj"]))
    before = _state(model)
    with pytest.raises(CheckpointError, match=r"Missing keys: \[.*k_proj.*unexpected keys: \[.*q_proj"):
        load_model_weights(model, tmp_path)
    _assert_same(model, before)


def test_adapter_folder_into_a_plain_model_says_so(tmp_path):
    """Adapter files but a model that is not a PeftModel: the error says what to wrap."""
    peft_model("lora").save_pretrained(tmp_path)
    with pytest.raises(CheckpointError, match="PeftModel"):
        load_model_weights(tiny_llama(), tmp_path)


@pytest.mark.parametrize("kind", ["lora", "prompt"])
def test_adapter_checkpoints_pass_every_check(tmp_path, kind):
    """A PeftModel's checkpoint-N is complete, get_last_checkpoint returns it, and an emptied adapter file is found."""
    trainer = _trainer(kind, _args(tmp_path, "run", max_steps=4))
    trainer.train()
    out = tmp_path / "run"
    last = out / "checkpoint-4"
    assert ADAPTER_FILES <= set(os.listdir(last))
    assert not {"model.safetensors", "pytorch_model.bin"} & set(os.listdir(last))
    assert is_checkpoint_complete(last)
    assert get_last_checkpoint(str(out)) == str(last)
    (last / "adapter_model.safetensors").write_bytes(b"")
    assert "adapter_model.safetensors" in checkpoint_problem(last)
    assert get_last_checkpoint(str(out)) == str(out / "checkpoint-2")


@pytest.mark.parametrize("kind", PEFT_KINDS)
def test_resume_is_bit_identical_to_the_uninterrupted_run(tmp_path, kind):
    """Stop after 4 steps, resume_from_checkpoint=True in a new Trainer: the same weights as 6 straight steps."""
    straight = _trainer(kind, _args(tmp_path, "straight"))
    straight.train()
    first = _trainer(kind, _args(tmp_path, "resumed"), callbacks=[StopAt(4)])
    first.train()
    resumed = _trainer(kind, _args(tmp_path, "resumed"))
    resumed.train(resume_from_checkpoint=True)
    assert resumed.state.global_step == 6
    _assert_same(resumed.model, _state(straight.model))
    losses = [h["loss"] for h in resumed.state.log_history if "loss" in h]
    assert losses == [h["loss"] for h in straight.state.log_history if "loss" in h]


@pytest.mark.parametrize("kind", PEFT_KINDS)
def test_load_best_model_at_end_loads_the_best_adapter(tmp_path, kind):
    """The best checkpoint is step 2 (a scripted score): the final model equals from_pretrained(best)."""
    args = _args(
        tmp_path,
        "best",
        eval_strategy="steps",
        eval_steps=2,
        load_best_model_at_end=True,
        metric_for_best_model="score",
    )
    scores = iter([0.9, 0.1, 0.2])
    trainer = _trainer(
        kind,
        args,
        eval_dataset=peft_data(kind, n=4, seed=1),
        compute_metrics=lambda prediction: {"score": next(scores)},
    )
    trainer.train()
    best = trainer.state.best_model_checkpoint
    assert best is not None and best.endswith("checkpoint-2")
    _assert_same(trainer.model, _reference(kind, best))
    assert not torch.equal(
        torch.cat([p.flatten() for p in _reference(kind, tmp_path / "best" / "checkpoint-6").values()]),
        torch.cat([p.flatten() for p in trainer.model.state_dict().values()]),
    )


@pytest.mark.parametrize("kind", ["lora", "lora_bert"])
def test_save_model_writes_the_adapter_peft_loads(tmp_path, kind):
    """save_model writes the adapter files; PeftModel.from_pretrained gives back the trained adapter."""
    trainer = _trainer(kind, _args(tmp_path, "run", max_steps=2, save_strategy="no"))
    trainer.train()
    trainer.save_model(str(tmp_path / "final"))
    assert ADAPTER_FILES <= set(os.listdir(tmp_path / "final"))
    _assert_same(trainer.model, _reference(kind, tmp_path / "final"))
