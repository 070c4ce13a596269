"""HFModule as a Lightning user meets it: their own checkpoints, subclasses and entry points."""

from __future__ import annotations

import types

import lightning as L
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from torch.utils.data import DataLoader, DistributedSampler

from hf_lightning import TrainingArguments, default_data_collator
from hf_lightning.adapters import AccumulationWindows, HFCheckpoint, HFModule
from hf_lightning.adapters.module_checks import check_windows_are_sharded
from tests.tiny import causal_lm_data, tiny_gpt2

# Lightning's warning for a module in eval mode at the start of a fit (docs/divergences.md: a Lightning
# user's own fit keeps it; HFModule trains in training mode regardless)
EVAL_MODE = r"module\(s\) in eval mode at the start of training"

ARGS = dict(learning_rate=1e-2, warmup_steps=3, lr_scheduler_type="linear", gradient_accumulation_steps=2)


def _trainer(**kwargs) -> L.Trainer:
    kwargs.setdefault("enable_checkpointing", False)
    return L.Trainer(
        accelerator="cpu", logger=False, enable_model_summary=False, enable_progress_bar=False, **kwargs
    )


def _windows(n: int = 32, steps: int = 2) -> AccumulationWindows:
    loader = DataLoader(causal_lm_data(n), batch_size=2, collate_fn=default_data_collator)
    return AccumulationWindows(loader, steps)


class _LearningRates(L.Callback):
    def __init__(self, stop_at: int | None = None) -> None:
        self.rates: list[float] = []
        self.stop_at = stop_at

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.rates.append(pl_module.current_learning_rate())
        if trainer.global_step == self.stop_at:
            trainer.should_stop = True


def test_fit_from_a_lightning_checkpoint_resumes_the_hf_schedule_and_the_weights(tmp_path):
    """Stop at step 4 with ModelCheckpoint, fit(ckpt_path=...) to step 7: rates and weights equal one run."""
    whole, whole_rates = tiny_gpt2(dropout=0.0), _LearningRates()
    _trainer(max_steps=7, callbacks=[whole_rates]).fit(HFModule(whole, TrainingArguments(**ARGS)), _windows())

    first = _LearningRates(stop_at=4)
    saver = ModelCheckpoint(dirpath=tmp_path, every_n_train_steps=4, save_top_k=-1)
    _trainer(max_steps=7, callbacks=[first, saver], enable_checkpointing=True).fit(
        HFModule(tiny_gpt2(dropout=0.0), TrainingArguments(**ARGS)), _windows()
    )
    resumed, second = tiny_gpt2(seed=1, dropout=0.0), _LearningRates()
    _trainer(max_steps=7, callbacks=[second]).fit(
        HFModule(resumed, TrainingArguments(**ARGS)),
        _windows(),
        ckpt_path=str(tmp_path / "epoch=0-step=4.ckpt"),
    )
    assert first.rates[:4] + second.rates == pytest.approx(whole_rates.rates, rel=1e-6)
    for a, b in zip(whole.parameters(), resumed.parameters()):
        torch.testing.assert_close(b, a)


def test_load_from_checkpoint_with_the_model_restores_the_weights(tmp_path):
    """HFModule.load_from_checkpoint(path, model=...) loads the trained weights into the given model."""
    model = tiny_gpt2(dropout=0.0)
    trainer = _trainer(max_steps=2)
    trainer.fit(HFModule(model, TrainingArguments(**ARGS)), _windows())
    trainer.save_checkpoint(tmp_path / "last.ckpt")
    loaded = HFModule.load_from_checkpoint(tmp_path / "last.ckpt", model=tiny_gpt2(seed=3))
    for a, b in zip(model.parameters(), loaded.model.parameters()):
        torch.testing.assert_close(b, a)


def test_load_from_checkpoint_without_a_model_says_to_pass_one(tmp_path):
    """Without model=, the error names the argument instead of Lightning's bare missing-argument TypeError."""
    with pytest.raises(TypeError, match="model="):
        HFModule.load_from_checkpoint(tmp_path / "missing.ckpt")


def test_a_subclass_with_a_metric_writes_folders_that_from_pretrained_loads(tmp_path):
    """HFCheckpoint saves a subclass of HFModule in transformers' format: config.json, plain weight names."""
    from transformers import GPT2LMHeadModel

    class WithRows(HFModule):
        def validation_step(self, batch, batch_idx, dataloader_idx=0):
            self.log("rows", float(batch["input_ids"].shape[0]))
            return super().validation_step(batch, batch_idx, dataloader_idx)

    model = tiny_gpt2(dropout=0.0)
    saver = HFCheckpoint(tmp_path, save_strategy="steps", save_steps=2)
    _trainer(max_steps=2, callbacks=[saver]).fit(WithRows(model, TrainingArguments(**ARGS)), _windows())
    folder = tmp_path / "checkpoint-2"
    assert (folder / "config.json").exists() and (folder / "training_args.bin").exists()
    loaded = GPT2LMHeadModel.from_pretrained(folder)
    for (name, a), b in zip(model.named_parameters(), loaded.parameters()):
        torch.testing.assert_close(b, a, msg=name)


def test_windows_over_an_unsharded_loader_under_several_processes_raise_naming_the_sampler():
    """Two processes and AccumulationWindows over a plain DataLoader: an error naming DistributedSampler."""
    trainer = types.SimpleNamespace(world_size=2, train_dataloader=_windows())
    with pytest.raises(ValueError, match="DistributedSampler"):
        check_windows_are_sharded(trainer)


def test_windows_over_a_distributed_sampler_pass_the_check():
    """A DataLoader sharded by a DistributedSampler is accepted (each process sees its own rows)."""
    data = causal_lm_data(8)
    sampler = DistributedSampler(data, num_replicas=2, rank=0)
    loader = DataLoader(data, batch_size=2, sampler=sampler, collate_fn=default_data_collator)
    check_windows_are_sharded(
        types.SimpleNamespace(world_size=2, train_dataloader=AccumulationWindows(loader, 2))
    )


def test_an_eval_mode_model_trains_in_train_mode():
    """A model in eval mode (as from_pretrained returns it) trains with dropout active."""
    seen: list[bool] = []
    model = tiny_gpt2(dropout=0.1).eval()
    model.transformer.drop.register_forward_hook(lambda module, inputs, output: seen.append(module.training))
    with pytest.warns(UserWarning, match=EVAL_MODE):  # Lightning's own notice, kept for Lightning users
        _trainer(max_steps=1).fit(HFModule(model, TrainingArguments(**ARGS)), _windows())
    # before them, the loss probe's forwards on the first window (hf_lightning.loss_rule) ran in eval mode
    assert seen[-2:] == [True, True] and seen.count(True) == 2


def test_an_eval_mode_model_matches_transformers_trainer(tmp_path):
    """Dropout on, eval-mode model, sequential data: HFModule's weights equal transformers.Trainer's."""
    import transformers

    kwargs = dict(
        per_device_train_batch_size=2,
        max_steps=2,
        train_sampling_strategy="sequential",
        report_to="none",
        save_strategy="no",
        use_cpu=True,
        disable_tqdm=True,
        seed=7,
        **ARGS,
    )
    theirs = tiny_gpt2(dropout=0.1, fix_hf_count=True).eval()
    transformers.Trainer(
        model=theirs,
        args=transformers.TrainingArguments(str(tmp_path), **kwargs),
        train_dataset=causal_lm_data(32),
    ).train()
    ours = tiny_gpt2(dropout=0.1).eval()
    module = HFModule(ours, TrainingArguments(str(tmp_path), **kwargs))
    torch.manual_seed(7)
    with pytest.warns(UserWarning, match=EVAL_MODE):
        _trainer(max_steps=2).fit(module, _windows())
    for a, b in zip(theirs.parameters(), ours.parameters()):
        torch.testing.assert_close(b, a, atol=1e-5, rtol=1e-4)


def test_predict_returns_the_model_outputs():
    """trainer.predict(HFModule) returns one ModelOutput (with logits) per batch."""
    loader = DataLoader(causal_lm_data(4), batch_size=2, collate_fn=default_data_collator)
    outputs = _trainer().predict(HFModule(tiny_gpt2()), loader)
    assert len(outputs) == 2 and outputs[0].logits.shape == (2, 12, 256)


def test_several_validation_loaders_log_one_eval_loss_each():
    """Two validation loaders: eval_loss/dataloader_idx_0 and eval_loss/dataloader_idx_1."""
    loaders = [
        DataLoader(causal_lm_data(4, seed=s), batch_size=2, collate_fn=default_data_collator) for s in (0, 1)
    ]
    metrics = _trainer().validate(HFModule(tiny_gpt2()), loaders, verbose=False)
    assert "eval_loss/dataloader_idx_0" in metrics[0] and "eval_loss/dataloader_idx_1" in metrics[1]


def test_test_on_an_unlabelled_split_says_to_drop_the_labels():
    """Labels of -1 (GLUE's unlabelled test split) raise an error naming the labels column and predict."""
    rows = [{"input_ids": torch.arange(4), "labels": torch.full((4,), -1)} for _ in range(2)]
    loader = DataLoader(rows, batch_size=2, collate_fn=default_data_collator)
    with pytest.raises(ValueError, match="remove_columns.*predict"):
        _trainer().test(HFModule(tiny_gpt2()), loader, verbose=False)


def test_test_without_labels_runs_and_logs_no_loss():
    """A test split with no labels column runs and logs nothing."""
    rows = [{"input_ids": torch.arange(4)} for _ in range(2)]
    loader = DataLoader(rows, batch_size=2, collate_fn=default_data_collator)
    assert _trainer().test(HFModule(tiny_gpt2()), loader, verbose=False) == [{}]


def test_accumulate_grad_batches_says_to_use_windows():
    """lightning.Trainer(accumulate_grad_batches=2) raises, naming gradient_accumulation_steps and AccumulationWindows."""
    loader = DataLoader(causal_lm_data(4), batch_size=2, collate_fn=default_data_collator)
    with pytest.raises(ValueError, match="gradient_accumulation_steps=2.*AccumulationWindows"):
        _trainer(max_steps=1, accumulate_grad_batches=2).fit(HFModule(tiny_gpt2()), loader)


def test_a_fit_with_a_datamodule_gives_no_transfer_hook_warning():
    """HFModule overrides no data hook in Lightning's eyes: a DataModule fit warns nothing about transfer."""
    import warnings

    class Data(L.LightningDataModule):
        def train_dataloader(self):
            return _windows(8, steps=1)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _trainer(max_steps=1).fit(HFModule(tiny_gpt2()), datamodule=Data())
    assert not [w for w in caught if "transfer_batch_to_device" in str(w.message)]


def test_the_module_keeps_the_plan_not_the_arguments(tmp_path):
    """``HFModule(model, args)`` translates ``args`` at construction: its optimizer comes from the plan's
    factory (``args.optim``'s class, transformers' weight-decay groups) and a checkpoint records the arguments
    as they were then, even if the object is changed afterwards."""
    args = TrainingArguments(**{**ARGS, "optim": "sgd", "weight_decay": 0.25})
    module = HFModule(tiny_gpt2(dropout=0.0), args)
    assert not hasattr(module, "args")
    optimizer = module.build_optimizer()
    assert type(optimizer) is torch.optim.SGD
    assert [group["weight_decay"] for group in optimizer.param_groups] == [0.25, 0.0]
    args.run_name = "changed-later"
    saver = HFCheckpoint(tmp_path, save_strategy="steps", save_steps=2)
    _trainer(max_steps=2, callbacks=[saver]).fit(module, _windows())
    saved = (tmp_path / "checkpoint-2" / "training_args.json").read_text()
    assert '"optim": "sgd"' in saved and "changed-later" not in saved
    assert (
        torch.load(tmp_path / "checkpoint-2" / "training_args.bin", weights_only=True)["weight_decay"] == 0.25
    )
