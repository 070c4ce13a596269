"""Training features of hf_lightning.Trainer beyond the loss: loggers, memory keys, tokens, precision, NEFTune."""

from __future__ import annotations

import csv
import glob
import os

import pytest
import torch

import hf_lightning
from tests.parity._run import BASE_ARGS, step_logs
from tests.tiny import RegressionModel, causal_lm_data, regression_data, tiny_gpt2


def _train(tmp_path, model=None, data=None, callbacks=None, **kwargs):
    args = hf_lightning.TrainingArguments(output_dir=str(tmp_path / "out"), **{**BASE_ARGS, **kwargs})
    trainer = hf_lightning.Trainer(
        model=model or RegressionModel(),
        args=args,
        train_dataset=data or regression_data(16),
        callbacks=callbacks,
    )
    trainer.train()
    return trainer


def test_tensorboard_logs_are_written_and_read_back(tmp_path):
    """report_to=tensorboard writes event files holding the same losses as log_history."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    trainer = _train(
        tmp_path, report_to="tensorboard", per_device_train_batch_size=4, max_steps=4, logging_steps=1
    )
    files = glob.glob(str(tmp_path / "out" / "**" / "events.out.tfevents.*"), recursive=True)
    assert files
    acc = EventAccumulator(os.path.dirname(files[0]))
    acc.Reload()
    tags = acc.Tags()["scalars"]
    loss_tag = next(t for t in tags if t.endswith("loss") and "train_" not in t)
    logged = [(e.step, e.value) for e in acc.Scalars(loss_tag)]
    expected = [(h["step"], h["loss"]) for h in step_logs(trainer)]
    assert [s for s, _ in logged] == [s for s, _ in expected]
    for (_, a), (_, b) in zip(logged, expected):
        assert a == pytest.approx(b, rel=1e-6)


def test_csv_logs_are_written_and_read_back(tmp_path):
    """report_to=csv writes a metrics.csv whose loss column equals log_history."""
    trainer = _train(tmp_path, report_to="csv", per_device_train_batch_size=4, max_steps=3, logging_steps=1)
    files = glob.glob(str(tmp_path / "out" / "**" / "metrics.csv"), recursive=True)
    assert files
    with open(files[0]) as fh:
        rows = [r for r in csv.DictReader(fh) if r.get("loss")]
    assert [float(r["loss"]) for r in rows] == pytest.approx(
        [h["loss"] for h in step_logs(trainer)], rel=1e-6
    )


def test_memory_metrics_when_not_skipped(tmp_path):
    """skip_memory_metrics=False adds transformers' train_mem_* keys to the final metrics."""
    trainer = _train(tmp_path, skip_memory_metrics=False, per_device_train_batch_size=4, max_steps=2)
    final = trainer.state.log_history[-1]
    assert {"train_mem_cpu_alloc_delta", "train_mem_cpu_peaked_delta"} <= set(final)


def test_include_num_input_tokens_seen_counts_tokens(tmp_path):
    """include_num_input_tokens_seen adds the running token count to each log."""
    data = causal_lm_data(n=8, seq_len=12)
    trainer = _train(
        tmp_path,
        model=tiny_gpt2(),
        data=data,
        include_num_input_tokens_seen=True,
        per_device_train_batch_size=2,
        max_steps=3,
        logging_steps=1,
    )
    assert [h["num_input_tokens_seen"] for h in step_logs(trainer)] == [24, 48, 72]
    assert trainer.state.num_input_tokens_seen == 72


def test_nan_losses_are_filtered_from_the_logged_average(tmp_path):
    """logging_nan_inf_filter replaces a NaN micro-batch loss by the running average (the log stays finite)."""

    class NanOnce(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.tensor(1.0))
            self.calls = 0

        def forward(self, input_x, labels=None):
            self.calls += 1
            loss = ((self.w * input_x - labels) ** 2).mean()
            return (loss * float("nan") if self.calls == 2 else loss,)

    trainer = _train(
        tmp_path,
        model=NanOnce(),
        per_device_train_batch_size=4,
        max_steps=3,
        logging_steps=3,
        max_grad_norm=0.0,
        optim="sgd",
    )
    assert all(torch.isfinite(torch.tensor(h["loss"])) for h in step_logs(trainer))


def test_bf16_mixed_precision_on_cpu(tmp_path):
    """bf16=True trains through Lightning's bf16-mixed plugin on CPU; weights stay float32."""
    trainer = _train(
        tmp_path,
        model=tiny_gpt2(),
        data=causal_lm_data(n=8),
        bf16=True,
        per_device_train_batch_size=2,
        max_steps=2,
        logging_steps=1,
    )
    assert len(step_logs(trainer)) == 2
    assert all(p.dtype == torch.float32 for p in trainer.model.parameters())


def test_neftune_noise_in_training_only_and_removed_after(tmp_path):
    """NEFTune: training-mode embeddings are noisy; eval mode and the post-train model are untouched."""
    seen = []

    class Probe(hf_lightning.TrainerCallback):
        def on_step_begin(self, args, state, control, model=None, **kwargs):
            emb = model.get_input_embeddings()
            ids = torch.arange(8).unsqueeze(0)
            model.train()
            noisy = emb(ids)
            model.eval()
            clean = emb(ids)
            model.train()
            seen.append((noisy - emb.weight[ids]).abs().max().item() > 0)
            seen.append(torch.equal(clean, emb.weight[ids]))

    trainer = _train(
        tmp_path,
        model=tiny_gpt2(),
        data=causal_lm_data(n=4),
        callbacks=[Probe()],
        neftune_noise_alpha=5.0,
        per_device_train_batch_size=2,
        max_steps=1,
    )
    assert seen == [True, True]
    emb = trainer.model.get_input_embeddings()
    emb.train()
    ids = torch.arange(8).unsqueeze(0)
    assert torch.equal(emb(ids), emb.weight[ids])


def test_activate_neftune_takes_and_returns_the_model_as_transformers_4(tmp_path):
    """``trainer.model = trainer._activate_neftune(trainer.model)`` (transformers 4.x's test) noises the
    training-mode embeddings; ``_deactivate_neftune(model)`` removes the hook and returns the model."""
    model = tiny_gpt2()
    args = hf_lightning.TrainingArguments(str(tmp_path), neftune_noise_alpha=0.4, report_to="none")
    trainer = hf_lightning.Trainer(model, args, train_dataset=causal_lm_data(n=4))
    assert trainer._activate_neftune(trainer.model) is model
    ids = torch.LongTensor([[1, 0, 1]])
    emb = model.get_input_embeddings()
    assert not torch.allclose(emb(ids), emb(ids))
    assert trainer._deactivate_neftune(model) is model
    assert torch.equal(emb(ids), emb(ids)) and len(emb._forward_hooks) == 0


def test_model_init_and_seed_give_reproducible_runs(tmp_path):
    """model_init with the same seed gives identical runs; data_seed changes the data order."""

    def run(**kw):
        args = hf_lightning.TrainingArguments(
            output_dir=str(tmp_path),
            **{**BASE_ARGS, **kw},
            per_device_train_batch_size=4,
            max_steps=4,
            logging_steps=1,
        )
        trainer = hf_lightning.Trainer(
            model_init=lambda: RegressionModel(), args=args, train_dataset=regression_data(32)
        )
        trainer.train()
        return [h["loss"] for h in step_logs(trainer)]

    assert run() == run()
    assert run(data_seed=123) != run()


def test_trainer_needs_a_model():
    """Neither model nor model_init: a clear error (as transformers)."""
    with pytest.raises(RuntimeError, match="model_init"):
        hf_lightning.Trainer(args=hf_lightning.TrainingArguments(output_dir="unused", report_to="none"))


def test_optimizers_and_optimizer_cls_and_kwargs_are_exclusive():
    """Passing both optimizers=(opt, None) and optimizer_cls_and_kwargs is rejected (transformers' RuntimeError)."""
    model = RegressionModel()
    with pytest.raises(RuntimeError, match="optimizer_cls_and_kwargs"):
        hf_lightning.Trainer(
            model=model,
            args=hf_lightning.TrainingArguments(output_dir="unused", report_to="none"),
            optimizers=(torch.optim.SGD(model.parameters(), lr=0.1), None),
            optimizer_cls_and_kwargs=(torch.optim.SGD, {"lr": 0.1}),
        )


def test_user_optimizer_and_scheduler_are_used(tmp_path):
    """optimizers=(opt, sched): the learning rates logged follow the user's scheduler."""
    model = RegressionModel()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: 1.0 / (step + 1))
    args = hf_lightning.TrainingArguments(
        output_dir=str(tmp_path), **BASE_ARGS, per_device_train_batch_size=4, max_steps=3, logging_steps=1
    )
    trainer = hf_lightning.Trainer(
        model=model, args=args, train_dataset=regression_data(16), optimizers=(opt, sched)
    )
    trainer.train()
    assert [h["learning_rate"] for h in step_logs(trainer)] == pytest.approx([0.1, 0.05, 0.1 / 3])
    assert trainer.optimizer is opt


def test_trainer_helpers(tmp_path):
    """get_num_trainable_parameters, get_learning_rates, get_optimizer_group, get_decay_parameter_names."""
    trainer = _train(
        tmp_path,
        model=tiny_gpt2(),
        data=causal_lm_data(n=4),
        per_device_train_batch_size=2,
        max_steps=1,
        weight_decay=0.1,
    )
    n = sum(p.numel() for p in trainer.model.parameters())
    assert trainer.get_num_trainable_parameters() == n
    assert len(trainer.get_learning_rates()) == 2
    decay = trainer.get_decay_parameter_names(trainer.model)
    assert all("bias" not in name and "ln_" not in name for name in decay)
    wte = trainer.model.transformer.wte.weight
    assert trainer.get_optimizer_group(wte)["weight_decay"] == 0.1


def test_torch_compile_trains_with_the_same_numbers(tmp_path):
    """torch_compile (eager backend on CPU) trains to the same losses as the uncompiled model."""
    plain = _train(
        tmp_path,
        model=tiny_gpt2(dropout=0.0),
        data=causal_lm_data(n=8),
        per_device_train_batch_size=2,
        max_steps=2,
        logging_steps=1,
    )
    compiled = _train(
        tmp_path,
        model=tiny_gpt2(dropout=0.0),
        data=causal_lm_data(n=8),
        per_device_train_batch_size=2,
        max_steps=2,
        logging_steps=1,
        torch_compile=True,
        torch_compile_backend="eager",
    )
    assert [h["loss"] for h in step_logs(compiled)] == pytest.approx(
        [h["loss"] for h in step_logs(plain)], rel=1e-5
    )
    assert "_orig_mod" not in "".join(compiled.model.state_dict())


def test_activation_checkpointing_trains_with_the_same_numbers(tmp_path):
    """activation_checkpointing recomputes activations but gives the same losses."""
    plain = _train(
        tmp_path,
        model=tiny_gpt2(dropout=0.0),
        data=causal_lm_data(n=8),
        per_device_train_batch_size=2,
        max_steps=2,
        logging_steps=1,
    )
    ckpt = _train(
        tmp_path,
        model=tiny_gpt2(dropout=0.0),
        data=causal_lm_data(n=8),
        per_device_train_batch_size=2,
        max_steps=2,
        logging_steps=1,
        activation_checkpointing=True,
    )
    assert ckpt.model.is_activation_checkpointing
    assert [h["loss"] for h in step_logs(ckpt)] == pytest.approx(
        [h["loss"] for h in step_logs(plain)], rel=1e-5
    )


def test_activation_checkpointing_needs_a_capable_model(tmp_path):
    """activation_checkpointing on a plain nn.Module: AttributeError (transformers' type) naming the argument."""
    with pytest.raises(AttributeError, match="activation_checkpointing"):
        _train(tmp_path, per_device_train_batch_size=4, max_steps=1, activation_checkpointing=True)


def test_every_callback_event_is_bridged():
    """Contract: every TrainerCallback.on_* event is listed where the loop fires it."""
    from hf_lightning.adapters.callbacks.loop_driver import BRIDGED_EVENTS

    events = {name for name in dir(hf_lightning.TrainerCallback) if name.startswith("on_")}
    assert set(BRIDGED_EVENTS) == events


def test_prepare_inputs_moves_mappings_that_are_not_dicts():
    """A collator's ``BatchEncoding``-like mapping (a ``UserDict``) is moved to the device like a dict."""
    from collections import UserDict

    from hf_lightning.trainer.steps import to_device as _to_device

    batch = UserDict({"input_ids": torch.ones(2), "nested": [torch.zeros(1)]})
    moved = _to_device(batch, torch.device("meta"))
    assert type(moved) is UserDict
    assert moved["input_ids"].device.type == "meta" and moved["nested"][0].device.type == "meta"
