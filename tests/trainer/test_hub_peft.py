"""push_to_hub with a PeftModel, for each hub_strategy: the adapter files reach the Hub (the repository root and
the checkpoint folders), as transformers pushes them (tests/hub_server.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from hf_lightning import Trainer, TrainingArguments
from tests.hub_server import TOKEN, USER
from tests.tiny_loading import peft_data, peft_model

REPO = f"{USER}/peft-run"
ADAPTER = {"adapter_model.safetensors", "adapter_config.json"}


def _trainer(tmp_path: Path, strategy: str) -> Trainer:
    args = TrainingArguments(
        output_dir=str(tmp_path / "peft-run"),
        use_cpu=True,
        report_to="none",
        disable_tqdm=True,
        per_device_train_batch_size=4,
        max_steps=4,
        save_steps=2,
        learning_rate=1e-2,
        push_to_hub=True,
        hub_token=TOKEN,
        hub_strategy=strategy,
        hub_always_push=True,
        seed=0,
    )
    return Trainer(model=peft_model("lora"), args=args, train_dataset=peft_data("lora"))


@pytest.mark.parametrize(
    ("strategy", "folders"),
    [
        ("end", set()),
        ("every_save", set()),
        ("checkpoint", {"last-checkpoint"}),
        ("all_checkpoints", {"checkpoint-2", "checkpoint-4"}),
    ],
)
def test_adapter_files_are_pushed_with_every_strategy(tmp_path, hub_server, strategy, folders):
    """The repository root holds the adapter (the trained one, byte for byte), and so does each pushed checkpoint."""
    trainer = _trainer(tmp_path, strategy)
    trainer.train()
    trainer.push_to_hub()
    pushed = hub_server.files(REPO)
    assert ADAPTER <= pushed
    assert not {"model.safetensors", "pytorch_model.bin"} & pushed
    assert {name.split("/")[0] for name in pushed if "/" in name} == folders
    for folder in folders:
        assert {f"{folder}/{name}" for name in ADAPTER} <= pushed
    local = tmp_path / "peft-run" / "adapter_model.safetensors"
    assert hub_server.read(REPO, "adapter_model.safetensors") == local.read_bytes()
    if strategy != "end":  # the first save's push (before push_to_hub) already carried the adapter
        first = hub_server.commits[0]
        assert first.message == "Training in progress, step 2"
        assert ADAPTER <= set(first.files)
