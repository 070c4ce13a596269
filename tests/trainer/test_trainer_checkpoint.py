"""Trainer checkpoints: what each checkpoint holds, save_model / save_state, resuming details (callback states,
save_only_model, best model, pruning) and the standalone HFCheckpoint Lightning callback."""

from __future__ import annotations

import json
import os

import lightning as L
import pytest
import torch
from torch import nn

import hf_lightning
from hf_lightning.adapters.callbacks.checkpointing import HFCheckpoint
from hf_lightning.callbacks import ExportableState, TrainerCallback
from hf_lightning.checkpoint import CheckpointError, load_model_weights, load_training_args
from hf_lightning.checkpoint.fresh_state import fast_forward_scheduler
from hf_lightning.optim import get_scheduler
from tests.tiny import RegressionModel, StopAt, regression_data

BASE = dict(
    report_to="none",
    use_cpu=True,
    disable_tqdm=True,
    seed=0,
    per_device_train_batch_size=4,
    learning_rate=0.1,
    logging_steps=1,
)


def _trainer(tmp_path, model=None, callbacks=None, name="out", **kwargs):
    args = hf_lightning.TrainingArguments(output_dir=str(tmp_path / name), **{**BASE, **kwargs})
    return hf_lightning.Trainer(
        model=model if model is not None else RegressionModel(dropout=0.1),
        args=args,
        train_dataset=regression_data(32),
        eval_dataset=regression_data(8, seed=1),
        callbacks=callbacks,
    )


def _checkpoints(folder) -> list[str]:
    return sorted(
        (n for n in os.listdir(folder) if n.startswith("checkpoint-")), key=lambda n: int(n.split("-")[1])
    )


class Counter(TrainerCallback, ExportableState):
    """A stateful callback: counts steps and remembers a constructor argument."""

    def __init__(self, label: str = "fresh") -> None:
        self.label = label
        self.steps = 0

    def on_step_end(self, args, state, control, **kwargs):
        self.steps += 1

    def state(self) -> dict:
        return {"args": {"label": self.label}, "attributes": {"steps": self.steps}}


# --- what is written -------------------------------------------------------------------------------
def test_checkpoint_folder_holds_transformers_files(tmp_path):
    """checkpoint-{step} holds weights, optimizer, scheduler, RNG, trainer state and the arguments."""
    trainer = _trainer(tmp_path, max_steps=4, save_steps=2)
    trainer.train()
    out = tmp_path / "out"
    assert _checkpoints(out) == ["checkpoint-2", "checkpoint-4"]
    assert not [n for n in os.listdir(out) if n.startswith(".")]  # no staging or trash left behind
    files = set(os.listdir(out / "checkpoint-4"))
    assert {
        "model.safetensors",
        "optimizer.pt",
        "scheduler.pt",
        "rng_state.pth",
        "trainer_state.json",
        "training_args.bin",
        "training_args.json",
    } <= files
    state = json.loads((out / "checkpoint-4" / "trainer_state.json").read_text())
    assert state["global_step"] == 4 and state["save_steps"] == 2
    assert "TrainerControl" in state["stateful_callbacks"]
    assert load_training_args(out / "checkpoint-4")["save_steps"] == 2


def test_save_only_model_writes_only_the_model(tmp_path):
    """save_only_model=True leaves optimizer, scheduler and RNG state out of the checkpoint."""
    _trainer(tmp_path, max_steps=2, save_steps=2, save_only_model=True).train()
    files = set(os.listdir(tmp_path / "out" / "checkpoint-2"))
    assert "model.safetensors" in files and "trainer_state.json" in files
    assert not files & {"optimizer.pt", "scheduler.pt", "rng_state.pth"}


@pytest.mark.parametrize(("limit", "kept"), [(None, [2, 4, 6, 8]), (2, [6, 8]), (1, [8])])
def test_save_total_limit_rotates_oldest_first(tmp_path, limit, kept):
    """Without a best checkpoint, rotation keeps the newest save_total_limit folders."""
    _trainer(tmp_path, max_steps=8, save_steps=2, save_total_limit=limit).train()
    assert _checkpoints(tmp_path / "out") == [f"checkpoint-{n}" for n in kept]


def test_save_strategy_epoch_saves_each_epoch_end(tmp_path):
    """save_strategy="epoch" writes one checkpoint per epoch, numbered by its global step."""
    _trainer(tmp_path, num_train_epochs=2, save_strategy="epoch").train()
    assert _checkpoints(tmp_path / "out") == ["checkpoint-8", "checkpoint-16"]


def test_save_strategy_no_writes_nothing(tmp_path):
    """save_strategy="no" writes no checkpoint."""
    _trainer(tmp_path, max_steps=4, save_strategy="no").train()
    assert not (tmp_path / "out").exists() or _checkpoints(tmp_path / "out") == []


class FakeTokenizer:
    """A processing class: records where it was saved."""

    def save_pretrained(self, folder):
        with open(os.path.join(folder, "tokenizer_config.json"), "w") as handle:
            handle.write("{}")


def test_save_model_writes_weights_processor_and_args(tmp_path):
    """save_model(dir) writes loadable weights, the processing class and the arguments."""
    trainer = _trainer(tmp_path, max_steps=2, save_strategy="no")
    trainer.processing_class = FakeTokenizer()
    trainer.train()
    trainer.save_model(str(tmp_path / "final"))
    assert {"model.safetensors", "tokenizer_config.json", "training_args.bin"} <= set(
        os.listdir(tmp_path / "final")
    )
    loaded = RegressionModel()
    load_model_weights(loaded, tmp_path / "final")
    torch.testing.assert_close(loaded.a, trainer.model.a)


def test_save_model_defaults_to_output_dir_and_collator_tokenizer(tmp_path):
    """Without a directory, save_model uses output_dir; without a processing class, the collator's tokenizer."""
    trainer = _trainer(tmp_path, save_strategy="no")
    collator = trainer.data_collator

    class WithTokenizer:
        tokenizer = FakeTokenizer()

        def __call__(self, features):
            return collator(features)

    trainer.data_collator = WithTokenizer()
    trainer.save_model()
    assert {"model.safetensors", "tokenizer_config.json"} <= set(os.listdir(tmp_path / "out"))


def test_save_state_writes_trainer_state_json(tmp_path):
    """save_state() writes the current state to output_dir/trainer_state.json."""
    trainer = _trainer(tmp_path, max_steps=3, save_strategy="no")
    trainer.train()
    trainer.save_state()
    saved = json.loads((tmp_path / "out" / "trainer_state.json").read_text())
    assert saved["global_step"] == 3 and len(saved["log_history"]) == len(trainer.state.log_history)


# --- resuming --------------------------------------------------------------------------------------
def test_resume_restores_step_epoch_and_log_history(tmp_path):
    """train(resume_from_checkpoint=path) continues from the saved global_step with its log_history."""
    _trainer(tmp_path, max_steps=6, save_steps=3, callbacks=[StopAt(3)]).train()
    trainer = _trainer(tmp_path, max_steps=6, save_steps=3)
    output = trainer.train(resume_from_checkpoint=str(tmp_path / "out" / "checkpoint-3"))
    assert output.global_step == 6
    assert [h["step"] for h in trainer.state.log_history if "loss" in h] == [1, 2, 3, 4, 5, 6]


def test_resume_true_without_checkpoint_is_an_error(tmp_path):
    """resume_from_checkpoint=True with no checkpoint in output_dir raises a clear ValueError."""
    (tmp_path / "out").mkdir()
    with pytest.raises(ValueError, match="No valid checkpoint found"):
        _trainer(tmp_path, max_steps=2).train(resume_from_checkpoint=True)


@pytest.mark.parametrize("restore", [True, False])
def test_callback_states_restored_only_when_asked(tmp_path, restore):
    """restore_callback_states_from_checkpoint rebuilds saved stateful callbacks; otherwise they start fresh."""
    _trainer(tmp_path, max_steps=6, save_steps=3, callbacks=[Counter("first"), StopAt(3)]).train()
    trainer = _trainer(
        tmp_path,
        max_steps=6,
        save_steps=3,
        callbacks=[Counter()],
        restore_callback_states_from_checkpoint=restore,
    )
    trainer.train(resume_from_checkpoint=str(tmp_path / "out" / "checkpoint-3"))
    counter = next(cb for cb in trainer.callback_handler.callbacks if isinstance(cb, Counter))
    assert (counter.label, counter.steps) == (("first", 6) if restore else ("fresh", 3))


def test_save_only_model_resume_keeps_fresh_optimizer_and_continues_schedule(tmp_path):
    """Divergence 6: a save_only_model checkpoint resumes with a fresh optimizer and the schedule at its step."""
    straight = _trainer(
        tmp_path, name="straight", max_steps=8, save_strategy="no", lr_scheduler_type="linear"
    )
    straight.train()
    _trainer(tmp_path, max_steps=8, save_steps=4, save_only_model=True, callbacks=[StopAt(4)]).train()
    resumed = _trainer(tmp_path, max_steps=8, save_steps=4, lr_scheduler_type="linear")
    resumed.train(resume_from_checkpoint=str(tmp_path / "out" / "checkpoint-4"))
    lr = {h["step"]: h["learning_rate"] for h in straight.state.log_history if "loss" in h}
    resumed_lr = {h["step"]: h["learning_rate"] for h in resumed.state.log_history if "loss" in h}
    assert resumed_lr[5] == lr[5] and resumed_lr[8] == lr[8]


@pytest.mark.parametrize("kind", ["linear", "cosine", "constant_with_warmup", "polynomial"])
def test_fast_forward_scheduler_reaches_the_schedule_at_that_step(kind):
    """fast_forward_scheduler(s, n) leaves the learning rate where n ordinary steps would."""

    def make():
        optimizer = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=0.1)
        return optimizer, get_scheduler(kind, optimizer, num_warmup_steps=2, num_training_steps=10)

    optimizer, scheduler = make()
    for _ in range(6):
        optimizer.step()
        scheduler.step()
    fresh_optimizer, fresh = make()
    fast_forward_scheduler(fresh, 6)
    assert fresh.get_last_lr() == scheduler.get_last_lr()
    assert fresh_optimizer.param_groups[0]["lr"] == optimizer.param_groups[0]["lr"]


def test_resume_into_a_different_model_names_the_keys(tmp_path):
    """Weights of another model raise a CheckpointError naming the folder and the keys, before any change."""
    _trainer(tmp_path, max_steps=2, save_steps=2).train()
    model = nn.Sequential(nn.Linear(3, 3))
    before = model[0].weight.detach().clone()
    trainer = _trainer(tmp_path, model=model, max_steps=4)
    with pytest.raises(CheckpointError, match=r"checkpoint-2.*Missing keys: \[0.bias, 0.weight\]"):
        trainer.train(resume_from_checkpoint=str(tmp_path / "out" / "checkpoint-2"))
    torch.testing.assert_close(model[0].weight, before)


# --- best model ----------------------------------------------------------------------------------------
def _scores(values):
    values = iter(values)
    return lambda prediction: {"score": next(values)}


def test_best_checkpoint_survives_rotation_and_final_pruning(tmp_path):
    """save_total_limit=1 keeps the best checkpoint during training and only it at the end."""
    trainer = _trainer(
        tmp_path,
        max_steps=8,
        eval_strategy="steps",
        eval_steps=2,
        save_steps=2,
        save_total_limit=1,
        metric_for_best_model="score",
        greater_is_better=True,
        load_best_model_at_end=True,
    )
    trainer.compute_metrics = _scores([0.1, 0.9, 0.2, 0.3])
    trainer.train()
    assert trainer.state.best_model_checkpoint == str(tmp_path / "out" / "checkpoint-4")
    assert _checkpoints(tmp_path / "out") == ["checkpoint-4"]
    best = RegressionModel()
    load_model_weights(best, tmp_path / "out" / "checkpoint-4")
    torch.testing.assert_close(trainer.model.a, best.a)


def test_metric_for_best_model_accepts_the_eval_prefix(tmp_path):
    """metric_for_best_model="eval_score" and "score" pick the same best checkpoint."""
    found = []
    for index, metric in enumerate(("score", "eval_score")):
        trainer = _trainer(
            tmp_path,
            name=f"run{index}",
            max_steps=6,
            eval_strategy="steps",
            eval_steps=2,
            save_steps=2,
            metric_for_best_model=metric,
            greater_is_better=False,
        )
        trainer.compute_metrics = _scores([0.5, 0.1, 0.3])
        trainer.train()
        found.append(
            (
                trainer.state.best_global_step,
                trainer.state.best_metric,
                os.path.basename(trainer.state.best_model_checkpoint),
            )
        )
    assert found[0] == found[1] == (4, 0.1, "checkpoint-4")


def test_missing_best_folder_is_dropped_when_resuming(tmp_path):
    """A best_model_checkpoint that no longer exists is forgotten on resume, as in transformers."""
    trainer = _trainer(
        tmp_path,
        max_steps=6,
        eval_strategy="steps",
        eval_steps=2,
        save_steps=2,
        metric_for_best_model="score",
        callbacks=[StopAt(4)],
    )
    trainer.compute_metrics = _scores([0.9, 0.1, 0.1])
    trainer.train()
    os.rename(tmp_path / "out" / "checkpoint-2", tmp_path / "gone")
    resumed = _trainer(
        tmp_path,
        max_steps=6,
        eval_strategy="steps",
        eval_steps=2,
        save_steps=2,
        metric_for_best_model="score",
    )
    resumed.compute_metrics = _scores([0.5])
    resumed.train(resume_from_checkpoint=str(tmp_path / "out" / "checkpoint-4"))
    assert resumed.state.best_global_step == 2 and resumed.state.best_model_checkpoint is None


# --- HFCheckpoint: a plain lightning.Trainer ------------------------------------------------------------
class LitRegression(L.LightningModule):
    """y = a*x + b; logs a scripted validation metric."""

    def __init__(self, scores=()) -> None:
        super().__init__()
        self.net = nn.Linear(1, 1)
        self.scores = list(scores)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return nn.functional.mse_loss(self.net(x), y)

    def validation_step(self, batch, batch_idx):
        self.log("score", self.scores.pop(0) if self.scores else 0.0)

    def configure_optimizers(self):
        optimizer = torch.optim.SGD(self.parameters(), lr=0.05)
        return {"optimizer": optimizer, "lr_scheduler": torch.optim.lr_scheduler.StepLR(optimizer, 2)}


def _fit(callback, scores=(), max_steps=8, val_every=2):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(16, 1, generator=g)
    data = torch.utils.data.TensorDataset(x, 2 * x + 1)
    loader = torch.utils.data.DataLoader(data, batch_size=2)
    val = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x[:1], x[:1]), batch_size=1)
    trainer = L.Trainer(
        max_steps=max_steps,
        val_check_interval=val_every,
        check_val_every_n_epoch=None,
        num_sanity_val_steps=0,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[callback],
    )
    module = LitRegression(scores)
    trainer.fit(module, loader, val)
    return trainer, module


@pytest.mark.parametrize(
    ("save_steps", "limit", "kept"), [(2, None, [2, 4, 6, 8]), (3, 1, [6]), (0.5, None, [4, 8])]
)
def test_hf_checkpoint_steps_and_rotation(tmp_path, save_steps, limit, kept):
    """HFCheckpoint(save_strategy="steps") saves every save_steps (int or ratio) and rotates."""
    _fit(HFCheckpoint(tmp_path, save_steps=save_steps, save_total_limit=limit))
    assert _checkpoints(tmp_path) == [f"checkpoint-{n}" for n in kept]
    assert {
        "model.safetensors",
        "optimizer.pt",
        "scheduler.pt",
        "rng_state.pth",
        "trainer_state.json",
    } <= set(os.listdir(tmp_path / f"checkpoint-{kept[-1]}"))


@pytest.mark.parametrize(("greater", "expected"), [(True, [2, 8]), (False, [2, 4, 6])])
def test_hf_checkpoint_best_saves_on_improvement(tmp_path, greater, expected):
    """HFCheckpoint(save_strategy="best") writes only after a validation that improved the monitor."""
    callback = HFCheckpoint(tmp_path, save_strategy="best", monitor="score", greater_is_better=greater)
    _fit(callback, scores=[0.5, 0.3, 0.2, 0.6])
    assert _checkpoints(tmp_path) == [f"checkpoint-{n}" for n in expected]
    assert callback.best_model_checkpoint == str(tmp_path / f"checkpoint-{expected[-1]}")
    state = json.loads((tmp_path / f"checkpoint-{expected[-1]}" / "trainer_state.json").read_text())
    assert state["best_global_step"] == expected[-1] and state["global_step"] == expected[-1]


def test_hf_checkpoint_rotation_keeps_the_best(tmp_path):
    """With a monitor, save_total_limit rotation spares the best checkpoint."""
    callback = HFCheckpoint(
        tmp_path, save_steps=2, save_total_limit=1, monitor="score", greater_is_better=True
    )
    _fit(callback, scores=[0.1, 0.9, 0.2, 0.3])
    assert _checkpoints(tmp_path) == ["checkpoint-4", "checkpoint-8"]
    assert callback.state_dict()["best_model_checkpoint"] == str(tmp_path / "checkpoint-4")


def test_hf_checkpoint_epoch_strategy_and_state_round_trip(tmp_path):
    """save_strategy="epoch" saves at each epoch end; the callback state round-trips through state_dict."""
    callback = HFCheckpoint(tmp_path, save_strategy="epoch", monitor="score")
    _fit(callback, scores=[0.1, 0.3, 0.2, 0.4, 0.2, 0.3, 0.1, 0.0], max_steps=16)
    assert _checkpoints(tmp_path) == ["checkpoint-8", "checkpoint-16"]
    restored = HFCheckpoint(tmp_path, save_strategy="epoch", monitor="score")
    restored.load_state_dict(callback.state_dict())
    assert restored.state_dict() == callback.state_dict() and restored.best_metric == pytest.approx(0.4)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        (dict(save_strategy="always"), "save_strategy='always'"),
        (dict(save_steps=0), "save_steps=0"),
        (dict(save_steps=2.5), "save_steps=2.5"),
        (dict(save_strategy="best"), "needs `monitor`"),
        (dict(save_total_limit=0), "save_total_limit=0"),
    ],
)
def test_hf_checkpoint_rejects_bad_arguments(tmp_path, kwargs, match):
    """Bad HFCheckpoint arguments raise a ValueError quoting the call."""
    with pytest.raises(ValueError, match=match):
        HFCheckpoint(tmp_path, **kwargs)


def test_hf_checkpoint_unknown_monitor_lists_the_metrics(tmp_path):
    """A monitor that is never logged raises a KeyError naming the available metrics."""
    with pytest.raises(KeyError, match="score"):
        _fit(HFCheckpoint(tmp_path, save_strategy="best", monitor="accuracy"), scores=[0.1])


def test_hf_checkpoint_monitor_must_be_a_single_number(tmp_path):
    """A monitored metric holding several numbers raises a ValueError naming the monitor."""

    class VectorScore(LitRegression):
        def validation_step(self, batch, batch_idx):
            self.trainer.callback_metrics["score"] = torch.tensor([0.1, 0.2])

    callback = HFCheckpoint(tmp_path, save_strategy="best", monitor="score")
    trainer = L.Trainer(
        max_steps=2,
        val_check_interval=2,
        check_val_every_n_epoch=None,
        num_sanity_val_steps=0,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[callback],
    )
    x = torch.randn(4, 1)
    data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, x), batch_size=2)
    with pytest.raises(ValueError, match="monitor='score'"):
        trainer.fit(VectorScore([]), data, data)


def test_checkpoint_error_is_a_value_error():
    """CheckpointError can be caught as ValueError, the error transformers raises for bad checkpoints."""
    assert issubclass(CheckpointError, ValueError)


def test_hf_checkpoint_saves_an_hf_module_with_save_pretrained(tmp_path):
    """For an HFModule, HFCheckpoint writes the wrapped model's save_pretrained files and the arguments."""
    from hf_lightning.adapters.module import HFModule
    from tests.tiny import causal_lm_data, tiny_gpt2

    loader = torch.utils.data.DataLoader(causal_lm_data(n=8), batch_size=2)
    module = HFModule(tiny_gpt2(), hf_lightning.TrainingArguments(output_dir=str(tmp_path), report_to="none"))
    trainer = L.Trainer(
        max_steps=2,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[HFCheckpoint(tmp_path / "ckpt", save_steps=2)],
    )
    trainer.fit(module, loader)
    files = set(os.listdir(tmp_path / "ckpt" / "checkpoint-2"))
    assert {"config.json", "model.safetensors", "optimizer.pt", "scheduler.pt", "training_args.json"} <= files
    reloaded = tiny_gpt2(seed=1)
    load_model_weights(reloaded, tmp_path / "ckpt" / "checkpoint-2")
    torch.testing.assert_close(reloaded.lm_head.weight, module.model.lm_head.weight)


def test_a_stale_resume_does_not_leak_into_the_next_run(tmp_path):
    """Weights loaded by hand from a checkpoint do not make a later plain train() restore that RNG state."""
    _trainer(tmp_path, max_steps=4, save_steps=2).train()
    straight = _trainer(tmp_path, name="straight", max_steps=4, save_strategy="no")
    straight.train()
    trainer = _trainer(tmp_path, name="again", max_steps=4, save_strategy="no")
    trainer._load_from_checkpoint(str(tmp_path / "out" / "checkpoint-2"))
    trainer.model.load_state_dict(RegressionModel(dropout=0.1).state_dict())  # back to the initial weights
    trainer.train()
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    assert losses == [h["loss"] for h in straight.state.log_history if "loss" in h]


def test_hf_checkpoint_best_on_hf_module_eval_loss(tmp_path):
    """HFModule logs ``eval_loss`` during a plain Lightning fit, so ``HFCheckpoint(save_strategy="best",
    monitor="eval_loss")`` works without a custom validation_step; the best checkpoint has the lowest."""
    from torch.utils.data import DataLoader

    from hf_lightning import default_data_collator
    from hf_lightning.adapters import AccumulationWindows, HFModule
    from tests.tiny import RegressionModel, regression_data

    seen: list[float] = []

    class Record(L.Callback):
        def on_validation_end(self, trainer, pl_module) -> None:
            seen.append(float(trainer.callback_metrics["eval_loss"]))

    callback = HFCheckpoint(tmp_path, save_strategy="best", monitor="eval_loss")
    args = hf_lightning.TrainingArguments(str(tmp_path / "args"), learning_rate=0.05)
    train = DataLoader(regression_data(32), batch_size=4, collate_fn=default_data_collator)
    val = DataLoader(regression_data(10, seed=1), batch_size=4, collate_fn=default_data_collator)
    trainer = L.Trainer(
        max_steps=8,
        val_check_interval=2,
        check_val_every_n_epoch=None,
        num_sanity_val_steps=0,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[Record(), callback],
        accelerator="cpu",
    )
    trainer.fit(HFModule(RegressionModel(), args), AccumulationWindows(train, 1), val)
    assert len(seen) == 4
    best = 2 * (seen.index(min(seen)) + 1)
    assert callback.best_model_checkpoint == str(tmp_path / f"checkpoint-{best}")
    state = json.loads((tmp_path / f"checkpoint-{best}" / "trainer_state.json").read_text())
    assert state["best_metric"] == pytest.approx(min(seen))
