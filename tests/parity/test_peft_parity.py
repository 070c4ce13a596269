"""A PEFT fine-tune with only the Trainer imports swapped: the same losses, grad norms and learning rates as
transformers.Trainer, the same checkpoint files and adapter configuration, and adapter files with the same bytes.

LoRA on a decoder (tiny Llama) and IA3 with gradient accumulation, LoRA on an encoder (tiny BERT sequence
classification: without accumulation, where divergence 12 of docs/divergences.md does not apply), LoRA with
gradient checkpointing. Prompt tuning writes the same files; its loss is another matter (the label count with
virtual tokens, DESIGN divergence 12), so its numbers are not compared here."""

from __future__ import annotations

import json
import os

import pytest
import torch

from tests.parity._run import BASE_ARGS, assert_same_logs
from tests.tiny_loading import peft_data, peft_model

OUR_EXTRA_FILES = {"checkpoint-manifest.json", "training_args.json"}  # docs/checkpointing.md
CASES = {
    "lora": dict(gradient_accumulation_steps=2),
    "ia3": dict(gradient_accumulation_steps=2),
    "lora_bert": dict(gradient_accumulation_steps=1),
    "lora_checkpointing": dict(gradient_accumulation_steps=2, gradient_checkpointing=True),
}


def _run_both(tmp_path, kind: str, **overrides):
    import transformers

    import hf_lightning

    runs = {}
    for name, lib in (("hf", transformers), ("ours", hf_lightning)):
        args = lib.TrainingArguments(
            output_dir=str(tmp_path / name),
            **{**BASE_ARGS, "save_strategy": "steps"},
            per_device_train_batch_size=2,
            learning_rate=1e-2,
            max_steps=4,
            save_steps=2,
            logging_steps=1,
            **overrides,
        )
        trainer = lib.Trainer(model=peft_model(kind), args=args, train_dataset=peft_data(kind))
        trainer.train()
        trainer.save_model()
        runs[name] = trainer
    return runs


@pytest.mark.parametrize("case", sorted(CASES))
def test_fine_tune_equals_transformers(tmp_path, case):
    """Losses, grad norms, learning rates (1e-5); file names, adapter_config.json and adapter bytes of every
    checkpoint and of the saved model."""
    kind = case.removesuffix("_checkpointing")
    runs = _run_both(tmp_path, kind, **CASES[case])
    assert_same_logs(runs["hf"], runs["ours"], rel=1e-5)
    if CASES[case].get("gradient_checkpointing"):
        assert runs["ours"].model.get_base_model().is_gradient_checkpointing
    for folder in ("checkpoint-2", "checkpoint-4", "."):
        theirs, ours = tmp_path / "hf" / folder, tmp_path / "ours" / folder
        extra = OUR_EXTRA_FILES if folder != "." else {"training_args.json"}
        assert set(os.listdir(ours)) - extra == set(os.listdir(theirs))
        with open(theirs / "adapter_config.json") as a, open(ours / "adapter_config.json") as b:
            assert json.load(b) == json.load(a)
        same = (ours / "adapter_model.safetensors").read_bytes() == (
            theirs / "adapter_model.safetensors"
        ).read_bytes()
        assert same, folder


def test_prompt_tuning_writes_transformers_files(tmp_path):
    """Prompt tuning: the checkpoints and the saved model hold transformers' files; the prompt embeddings saved."""
    from safetensors.torch import load_file

    runs = _run_both(tmp_path, "prompt")
    for folder in ("checkpoint-2", "checkpoint-4"):
        ours = set(os.listdir(tmp_path / "ours" / folder))
        assert ours - OUR_EXTRA_FILES == set(os.listdir(tmp_path / "hf" / folder))
    saved = load_file(tmp_path / "ours" / "adapter_model.safetensors")
    assert set(saved) == {"prompt_embeddings"}
    model = runs["ours"].model
    torch.testing.assert_close(saved["prompt_embeddings"], model.get_prompt_embedding_to_save("default"))


def test_transformers_resumes_a_mismatched_adapter_silently(tmp_path):
    """A LoRA-on-q/v checkpoint loaded into a LoRA on k_proj (what resume and load-best call): transformers returns
    without a word and the adapter is the fresh one; hf_lightning refuses it naming the keys, the model unchanged
    (docs/divergences.md, the loud table)."""
    import peft
    import transformers

    import hf_lightning
    from hf_lightning.checkpoint import CheckpointError
    from tests.tiny_loading import tiny_llama

    _run_both(tmp_path, "lora")
    checkpoint = str(tmp_path / "hf" / "checkpoint-2")
    for name, lib in (("hf", transformers), ("ours", hf_lightning)):
        config = peft.LoraConfig(r=4, target_modules=["k_proj"], task_type="CAUSAL_LM")
        other = peft.get_peft_model(tiny_llama(), config)
        before = {key: value.clone() for key, value in other.state_dict().items()}
        args = lib.TrainingArguments(output_dir=str(tmp_path / f"{name}-other"), **BASE_ARGS)
        trainer = lib.Trainer(model=other, args=args, train_dataset=peft_data("lora"))
        if name == "hf":
            trainer._load_from_checkpoint(checkpoint)  # no error, no warning from peft
        else:
            with pytest.raises(
                CheckpointError, match=r"Missing keys: \[.*k_proj.*unexpected keys: \[.*q_proj"
            ):
                trainer._load_from_checkpoint(checkpoint)
        for key, value in other.state_dict().items():
            assert torch.equal(value, before[key]), key  # transformers: nothing of the checkpoint is in it
