"""Loud, early, never silent: empty training sets, damaged checkpoints, a resume without optimizer state,
non-finite losses and weights, impossible argument values."""

from __future__ import annotations

import json
import logging
import math
import os
from pathlib import Path

import lightning as L
import pytest
import safetensors.torch
import torch
from torch import nn
from torch.utils.data import DataLoader

import hf_lightning
from hf_lightning import NonFiniteError, StopOnNonFinite, TrainingArguments, default_data_collator
from hf_lightning.adapters import AccumulationWindows, HFModule
from hf_lightning.adapters.callbacks.nonfinite import StopOnNonFiniteLightning
from hf_lightning.checkpoint import CheckpointError
from hf_lightning.checkpoint.verify import MANIFEST_NAME
from tests.tiny import RegressionModel, regression_data

BASE = dict(
    report_to="none",
    use_cpu=True,
    disable_tqdm=True,
    seed=0,
    per_device_train_batch_size=4,
    learning_rate=0.1,
    logging_steps=1,
)


def _trainer(tmp_path, data=None, model=None, callbacks=None, **kwargs) -> hf_lightning.Trainer:
    args = TrainingArguments(output_dir=str(tmp_path / "out"), **{**BASE, **kwargs})
    return hf_lightning.Trainer(
        model=model if model is not None else RegressionModel(),
        args=args,
        train_dataset=regression_data(16) if data is None else data,
        callbacks=callbacks,
    )


def _trained(tmp_path, **kwargs) -> str:
    """Train 4 steps saving every 2; returns the output folder (checkpoint-2 and checkpoint-4)."""
    _trainer(tmp_path, max_steps=4, save_steps=2, **kwargs).train()
    return str(tmp_path / "out")


class NaNFrom(nn.Module):
    """RegressionModel whose training loss is NaN from its ``step``-th training forward on."""

    def __init__(self, step: int) -> None:
        super().__init__()
        self.inner = RegressionModel()
        self.step, self.calls = step, 0

    def forward(self, input_x, labels=None):
        loss, y = self.inner(input_x, labels)
        if self.training:
            self.calls += 1
            if self.calls >= self.step:
                loss = loss * float("nan")
        return loss, y


class StepCounter(hf_lightning.TrainerCallback):
    """Counts the optimizer steps this run makes."""

    def __init__(self) -> None:
        self.steps = 0

    def on_step_end(self, args, state, control, **kwargs):
        self.steps += 1


def _weights_finite(folder: str) -> bool:
    stored = safetensors.torch.load_file(os.path.join(folder, "model.safetensors"))
    return all(bool(torch.isfinite(t).all()) for t in stored.values())


def _messages(caplog) -> str:
    return "\n".join(r.getMessage() for r in caplog.records)


# --- 1. empty training set ---------------------------------------------------------------------------
def test_empty_train_dataset_with_max_steps_raises_before_any_step(tmp_path):
    """An empty train_dataset with max_steps raises ValueError naming the dataset and its length 0."""
    with pytest.raises(ValueError, match=r"train_dataset.*empty: len\(train_dataset\) == 0"):
        _trainer(tmp_path, data=[], max_steps=3).train()


def test_empty_train_dataset_with_epochs_raises_the_same_error(tmp_path):
    """With num_train_epochs the error names the empty dataset, not a missing length or max_steps."""
    with pytest.raises(ValueError, match=r"train_dataset.*empty: len\(train_dataset\) == 0"):
        _trainer(tmp_path, data=[], num_train_epochs=1).train()


def test_dataset_smaller_than_a_dropped_batch_names_its_length_and_drop_last(tmp_path):
    """3 examples, batch 4 and dataloader_drop_last=True: the error names 3 and dataloader_drop_last."""
    with pytest.raises(ValueError, match=r"has 3 examples.*dataloader_drop_last=True"):
        _trainer(tmp_path, data=regression_data(3), max_steps=2, dataloader_drop_last=True).train()


# --- 2. damaged checkpoint content -------------------------------------------------------------------
def test_garbage_trainer_state_on_explicit_path_raises_checkpoint_error_naming_it(tmp_path):
    """A trainer_state.json that is not JSON makes resume_from_checkpoint=path raise CheckpointError naming it."""
    out = _trained(tmp_path)
    (tmp_path / "out" / "checkpoint-4" / "trainer_state.json").write_text("{ not json")
    with pytest.raises(CheckpointError, match=r"trainer_state\.json"):
        _trainer(tmp_path, max_steps=6, save_steps=2).train(resume_from_checkpoint=f"{out}/checkpoint-4")


def test_garbage_trainer_state_without_manifest_is_named_by_the_json_check(tmp_path):
    """Without a manifest (a transformers checkpoint) the JSON check itself names trainer_state.json."""
    out = _trained(tmp_path)
    os.remove(f"{out}/checkpoint-4/{MANIFEST_NAME}")
    (tmp_path / "out" / "checkpoint-4" / "trainer_state.json").write_text("{ not json")
    with pytest.raises(CheckpointError, match=r"trainer_state\.json` is not valid JSON"):
        _trainer(tmp_path, max_steps=6, save_steps=2).train(resume_from_checkpoint=f"{out}/checkpoint-4")


def _truncate(path: str, keep: float = 0.5) -> None:
    with open(path, "r+b") as handle:
        handle.truncate(int(os.path.getsize(path) * keep))


def test_resume_true_skips_a_truncated_newest_checkpoint_and_logs_why(tmp_path, caplog):
    """resume=True passes over checkpoint-4 with a truncated model.safetensors, says why, resumes from 2."""
    out = _trained(tmp_path)
    _truncate(f"{out}/checkpoint-4/model.safetensors")
    counter = StepCounter()
    trainer = _trainer(tmp_path, max_steps=4, save_steps=2, callbacks=[counter])
    with caplog.at_level(logging.WARNING):
        trainer.train(resume_from_checkpoint=True)
    assert "Skipping checkpoint" in _messages(caplog) and "checkpoint-4/model.safetensors" in _messages(
        caplog
    )
    assert counter.steps == 2  # steps 3 and 4: resumed from checkpoint-2


def test_truncated_safetensors_without_manifest_fails_the_header_check(tmp_path):
    """Without a manifest, a truncated model.safetensors is named by the safetensors header check."""
    out = _trained(tmp_path)
    os.remove(f"{out}/checkpoint-4/{MANIFEST_NAME}")
    _truncate(f"{out}/checkpoint-4/model.safetensors", 0.8)
    with pytest.raises(CheckpointError, match=r"model\.safetensors` is truncated"):
        _trainer(tmp_path, max_steps=6, save_steps=2).train(resume_from_checkpoint=f"{out}/checkpoint-4")


def test_optimizer_file_refused_by_weights_only_makes_resume_true_fall_back(tmp_path, caplog):
    """An optimizer.pt holding a pickled object (refused by weights_only) is skipped by resume=True."""
    out = _trained(tmp_path)
    os.remove(f"{out}/checkpoint-4/{MANIFEST_NAME}")
    torch.save({"state": logging.getLogger("x")}, f"{out}/checkpoint-4/optimizer.pt")
    with caplog.at_level(logging.WARNING):
        _trainer(tmp_path, max_steps=4, save_steps=2).train(resume_from_checkpoint=True)
    assert "checkpoint-4/optimizer.pt" in _messages(caplog) and "Refused to load" in _messages(caplog)


def test_incomplete_sharded_index_is_skipped_by_resume_true(tmp_path, caplog):
    """A weight index listing a shard that is absent makes resume=True skip the checkpoint, naming the shard."""
    out = _trained(tmp_path)
    index = {"metadata": {}, "weight_map": {"a": "model-00001-of-00002.safetensors"}}
    with open(f"{out}/checkpoint-4/model.safetensors.index.json", "w") as handle:
        json.dump(index, handle)
    with caplog.at_level(logging.WARNING):
        _trainer(tmp_path, max_steps=4, save_steps=2).train(resume_from_checkpoint=True)
    assert "model-00001-of-00002.safetensors" in _messages(caplog)


def _reshard(folder: str) -> list[str]:
    """Lay model.safetensors out again as an index and one shard per tensor, as a user's conversion does."""
    state = safetensors.torch.load_file(f"{folder}/model.safetensors")
    os.remove(f"{folder}/model.safetensors")
    shards = {key: f"model-{i + 1:05d}-of-{len(state):05d}.safetensors" for i, key in enumerate(state)}
    for key, shard in shards.items():
        safetensors.torch.save_file({key: state[key]}, f"{folder}/{shard}")
    with open(f"{folder}/model.safetensors.index.json", "w") as handle:
        json.dump({"metadata": {}, "weight_map": shards}, handle)
    return sorted(shards.values())


def test_weights_laid_out_again_as_shards_resume_as_saved(tmp_path):
    """A checkpoint whose model.safetensors was converted to an index and shards (transformers' own tests do
    this) is not damage: it resumes, to the weights of the run that was not interrupted."""
    out = _trained(tmp_path)
    _reshard(f"{out}/checkpoint-2")
    trainer = _trainer(tmp_path / "again", max_steps=4, save_steps=2)
    trainer.train(resume_from_checkpoint=f"{out}/checkpoint-2")
    whole = safetensors.torch.load_file(f"{out}/checkpoint-4/model.safetensors")
    assert {k: v.item() for k, v in trainer.model.state_dict().items()} == {
        k: v.item() for k, v in whole.items()
    }


def test_weights_laid_out_again_with_a_shard_lost_are_damage(tmp_path):
    """The same conversion with one shard gone raises CheckpointError naming the missing shard."""
    out = _trained(tmp_path)
    lost = _reshard(f"{out}/checkpoint-2")[0]
    os.remove(f"{out}/checkpoint-2/{lost}")
    with pytest.raises(
        CheckpointError, match=rf"shards \['{lost}'\] listed in model\.safetensors\.index\.json"
    ):
        _trainer(tmp_path, max_steps=4, save_steps=2).train(resume_from_checkpoint=f"{out}/checkpoint-2")


def test_bit_flip_in_weights_is_caught_by_the_manifest(tmp_path):
    """A flipped bit inside model.safetensors' tensor data (headers intact) raises CheckpointError naming it."""
    out = _trained(tmp_path)
    path = f"{out}/checkpoint-4/model.safetensors"
    data = bytearray(Path(path).read_bytes())
    data[-1] ^= 0x10
    Path(path).write_bytes(bytes(data))
    with pytest.raises(
        CheckpointError, match=r"model\.safetensors` is corrupt: its (SHA-256|XXH3-128 checksum)"
    ):
        _trainer(tmp_path, max_steps=6, save_steps=2).train(resume_from_checkpoint=f"{out}/checkpoint-4")


# --- 3. resuming without optimizer / scheduler ---------------------------------------------------------
def test_missing_optimizer_and_scheduler_warn_what_starts_fresh(tmp_path, caplog):
    """A checkpoint that lost optimizer.pt and scheduler.pt resumes with a warning naming them and the fresh optimizer."""
    out = _trained(tmp_path)
    for name in ("optimizer.pt", "scheduler.pt"):
        os.remove(f"{out}/checkpoint-4/{name}")
    with caplog.at_level(logging.WARNING):
        _trainer(tmp_path, max_steps=5, save_steps=2).train(resume_from_checkpoint=f"{out}/checkpoint-4")
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("optimizer.pt and scheduler.pt" in m and "optimizer starts fresh" in m for m in warned)


def test_save_only_model_checkpoint_resumes_without_that_warning(tmp_path, caplog):
    """A save_only_model checkpoint has no optimizer by design: no warning about a fresh optimizer."""
    out = _trained(tmp_path, save_only_model=True)
    with caplog.at_level(logging.WARNING):
        _trainer(tmp_path, max_steps=5, save_steps=2, save_only_model=True).train(
            resume_from_checkpoint=f"{out}/checkpoint-4"
        )
    assert "optimizer starts fresh" not in _messages(caplog)


def test_resume_true_prefers_a_checkpoint_that_kept_its_optimizer(tmp_path, caplog):
    """resume=True passes over a checkpoint whose saved optimizer.pt is gone, naming it."""
    out = _trained(tmp_path)
    os.remove(f"{out}/checkpoint-4/optimizer.pt")
    with caplog.at_level(logging.WARNING):
        _trainer(tmp_path, max_steps=4, save_steps=2).train(resume_from_checkpoint=True)
    assert "Skipping checkpoint" in _messages(caplog) and "optimizer.pt" in _messages(caplog)


# --- 4. non-finite losses and weights --------------------------------------------------------------------
def test_first_filtered_nan_loss_is_warned_with_its_step(tmp_path, caplog):
    """A NaN loss from step 3 on is warned once, naming step 3 and nan, although the logged loss hides it."""
    with caplog.at_level(logging.WARNING):
        _trainer(tmp_path, model=NaNFrom(3), max_steps=5, save_strategy="no").train()
    loss_warnings = [m for m in _messages(caplog).splitlines() if "the training loss is nan" in m]
    assert len(loss_warnings) == 1 and loss_warnings[0].startswith("Step 3:")


def test_first_nonfinite_weight_is_warned_with_its_step(tmp_path, caplog):
    """The step that leaves NaN weights is warned once, naming the step and a parameter."""
    with caplog.at_level(logging.WARNING):
        _trainer(tmp_path, model=NaNFrom(3), max_steps=5, save_strategy="no").train()
    weight_warnings = [m for m in _messages(caplog).splitlines() if "weights are no longer finite" in m]
    assert (
        len(weight_warnings) == 1
        and weight_warnings[0].startswith("Step 3:")
        and "inner." in weight_warnings[0]
    )


def test_nan_checkpoints_never_replace_or_rotate_out_finite_ones(tmp_path, caplog):
    """With NaN from step 3, save_steps=1 and save_total_limit=2: only the finite checkpoints 1 and 2 remain."""
    with caplog.at_level(logging.WARNING):
        _trainer(tmp_path, model=NaNFrom(3), max_steps=5, save_steps=1, save_total_limit=2).train()
    out = tmp_path / "out"
    assert sorted(n for n in os.listdir(out) if n.startswith("checkpoint-")) == [
        "checkpoint-1",
        "checkpoint-2",
    ]
    assert all(_weights_finite(str(out / n)) for n in ("checkpoint-1", "checkpoint-2"))
    assert "Not writing" in _messages(caplog) and "checkpoint-3" in _messages(caplog)


def test_stop_on_nonfinite_stops_at_the_step_and_keeps_the_last_good_checkpoint(tmp_path):
    """StopOnNonFinite raises NonFiniteError naming step 3; checkpoint-2, the newest, holds finite weights."""
    trainer = _trainer(tmp_path, model=NaNFrom(3), max_steps=5, save_steps=1, callbacks=[StopOnNonFinite()])
    with pytest.raises(NonFiniteError, match="at step 3") as raised:
        trainer.train()
    out = tmp_path / "out"
    assert raised.value.step == 3 and trainer.state.global_step == 2
    assert sorted(n for n in os.listdir(out) if n.startswith("checkpoint-")) == [
        "checkpoint-1",
        "checkpoint-2",
    ]
    assert _weights_finite(str(out / "checkpoint-2"))


class PoisonAfter(hf_lightning.TrainerCallback):
    """Sets parameter ``a`` to +inf right after the optimizer update of step ``step`` (the loss stays finite)."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_optimizer_step(self, args, state, control, model=None, **kwargs):
        if state.global_step + 1 == self.step:
            with torch.no_grad():
                model.a.fill_(float("inf"))


def test_stop_on_nonfinite_also_stops_at_nonfinite_weights(tmp_path):
    """Weights that turn infinite in step 2 (finite loss) stop training with NonFiniteError naming step 2."""
    callbacks = [PoisonAfter(2), StopOnNonFinite()]
    trainer = _trainer(tmp_path, max_steps=5, save_strategy="no", callbacks=callbacks)
    with pytest.raises(NonFiniteError, match="weights are not finite after step 2") as raised:
        trainer.train()
    assert raised.value.step == 2


def test_lightning_callback_stops_a_plain_lightning_fit_at_the_nan_step(tmp_path):
    """StopOnNonFiniteLightning stops HFModule in a plain lightning.Trainer at the NaN step, naming it."""
    args = TrainingArguments(output_dir=str(tmp_path), learning_rate=0.05, max_steps=5, report_to="none")
    loader = DataLoader(regression_data(32), batch_size=4, shuffle=False, collate_fn=default_data_collator)
    module = HFModule(NaNFrom(3), args)
    trainer = L.Trainer(
        accelerator="cpu",
        logger=False,
        enable_checkpointing=False,
        enable_model_summary=False,
        enable_progress_bar=False,
        max_steps=5,
        callbacks=[StopOnNonFiniteLightning()],
    )
    with pytest.raises(NonFiniteError, match="at step 3"):
        trainer.fit(module, train_dataloaders=AccumulationWindows(loader, 1))
    assert trainer.global_step == 2
    assert all(math.isfinite(float(p.detach())) for p in module.model.parameters())


# --- 5. impossible argument values ------------------------------------------------------------------------
def test_zero_gradient_accumulation_steps_is_a_value_error_naming_the_field():
    """gradient_accumulation_steps=0 raises ValueError naming the field and the allowed values."""
    with pytest.raises(ValueError, match=r"gradient_accumulation_steps=0\)` must be an int >= 1"):
        TrainingArguments(output_dir="unused", gradient_accumulation_steps=0)


def test_text_learning_rate_is_a_type_error_naming_the_field():
    """learning_rate='abc' raises TypeError at construction naming the field and the expected type."""
    with pytest.raises(TypeError, match=r"learning_rate='abc'\)` must be a number, got str"):
        TrainingArguments(output_dir="unused", learning_rate="abc")


def test_negative_learning_rate_is_a_value_error():
    """learning_rate=-1 raises ValueError naming the field and the allowed range."""
    with pytest.raises(ValueError, match=r"learning_rate=-1\)` must be >= 0"):
        TrainingArguments(output_dir="unused", learning_rate=-1)


def test_unparsable_json_dict_field_names_the_field():
    """A JSON-string dict field that does not parse raises ValueError naming the field."""
    with pytest.raises(ValueError, match=r"accelerator_config='\{not json'\)` is not a valid JSON object"):
        TrainingArguments(output_dir="unused", accelerator_config="{not json")


def test_stop_on_nonfinite_defers_a_loss_error_to_step_end_with_several_processes(monkeypatch):
    """Under DDP a rank's own NaN loss raises at on_step_end (no rank left waiting in the all-reduce)."""
    import hf_lightning.callbacks.nonfinite as nonfinite

    monkeypatch.setattr(nonfinite, "_distributed", lambda: True)
    stopper = StopOnNonFinite()
    stopper.nonfinite_loss(4, float("nan"))  # no error inside the step
    state = hf_lightning.TrainerState(global_step=4)
    with pytest.raises(NonFiniteError, match="at step 4") as raised:
        stopper.on_step_end(None, state, None, model=RegressionModel())
    assert raised.value.step == 4


@pytest.mark.parametrize(
    "values, expected",
    [
        ([1.0, 2.0], None),
        ([3e38, 3e38], None),  # finite weights whose float32 sum overflows: checked element by element
        ([1.0, float("nan")], "w"),
        ([float("inf"), -float("inf")], "w"),
    ],
)
def test_first_nonfinite_parameter_is_exact(values, expected):
    """A parameter is reported exactly when one of its elements is NaN or ±inf (dtypes float32 and bf16)."""
    from hf_lightning.callbacks.nonfinite import first_nonfinite_parameter

    for dtype in (torch.float32, torch.bfloat16):
        model = torch.nn.Module()
        model.ok = torch.nn.Parameter(torch.ones(3, dtype=dtype))
        model.w = torch.nn.Parameter(torch.tensor(values, dtype=dtype))
        assert first_nonfinite_parameter(model) == expected
