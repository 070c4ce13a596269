"""Trainer.create_model_card: README.md in output_dir, built with huggingface_hub's ModelCard."""

from __future__ import annotations

from huggingface_hub import ModelCard

from hf_lightning import Trainer, TrainingArguments
from hf_lightning.args.hyperparameters import hyperparameters_of
from hf_lightning.trainer.model_card_summary import results_of
from tests.tiny import RegressionModel


def _trainer(tmp_path, **kwargs) -> Trainer:
    args = TrainingArguments(output_dir=str(tmp_path / "my-model"), use_cpu=True, report_to="none", **kwargs)
    return Trainer(model=RegressionModel(), args=args)


def test_card_is_written_in_output_dir(tmp_path):
    """create_model_card writes output_dir/README.md named after the folder, tagged generated_from_trainer."""
    _trainer(tmp_path).create_model_card()
    card = ModelCard.load(tmp_path / "my-model" / "README.md")
    assert card.data.tags == ["generated_from_trainer"]
    assert card.data.to_dict()["model-index"] == [{"name": "my-model", "results": []}]
    assert "# my-model" in card.text


def test_only_the_main_process_writes(tmp_path, monkeypatch):
    """On a process other than the main one nothing is written."""
    trainer = _trainer(tmp_path)
    monkeypatch.setattr(trainer, "is_world_process_zero", lambda: False)
    trainer.create_model_card()
    assert not (tmp_path / "my-model" / "README.md").exists()


def test_existing_card_tags_are_kept(tmp_path):
    """Tags of a README.md already in output_dir are added to the given tags."""
    trainer = _trainer(tmp_path)
    trainer.create_model_card(tags=["first"])
    trainer.create_model_card(tags=["second"])
    card = ModelCard.load(tmp_path / "my-model" / "README.md")
    assert card.data.tags == ["second", "first", "generated_from_trainer"]


def test_hyperparameters_show_total_batch_size_with_accumulation(tmp_path):
    """Gradient accumulation adds gradient_accumulation_steps and total_train_batch_size."""
    params = hyperparameters_of(_trainer(tmp_path, gradient_accumulation_steps=4).args)
    assert params["gradient_accumulation_steps"] == 4
    assert params["total_train_batch_size"] == 4 * params["train_batch_size"]


def test_results_rows_carry_the_last_training_loss():
    """Each evaluation row shows the last training loss logged before it ("No log" before any)."""
    history = [
        {"eval_loss": 3.0, "epoch": 0.0, "step": 0},
        {"loss": 2.0, "epoch": 1.0, "step": 5},
        {"eval_loss": 1.0, "eval_runtime": 0.1, "epoch": 1.0, "step": 5},
        {"train_runtime": 1.0, "epoch": 1.0, "step": 5},
    ]
    rows, last = results_of(history)
    assert [row["Training Loss"] for row in rows] == ["No log", 2.0]
    assert rows[1] == {"Training Loss": 2.0, "Epoch": 1.0, "Step": 5, "Validation Loss": 1.0}
    assert last == {"Loss": 1.0}
