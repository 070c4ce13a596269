"""Parity of the training semantics around the loss: schedules, callbacks, custom losses."""

from __future__ import annotations

import contextlib

import pytest
import torch

import hf_lightning
from tests.parity._run import BASE_ARGS, assert_same_logs, run_both, step_logs
from tests.tiny import RegressionModel, causal_lm_data, regression_data, tiny_gpt2

SCHEDULES = [
    ("linear", None),
    ("cosine", None),
    ("cosine_with_restarts", {"num_cycles": 2}),
    ("polynomial", {"power": 2.0, "lr_end": 1e-5}),
    ("constant", None),
    ("constant_with_warmup", None),
    ("inverse_sqrt", None),
    ("cosine_with_min_lr", {"min_lr": 1e-4}),
    ("cosine_warmup_with_min_lr", {"min_lr_rate": 0.1}),
    ("warmup_stable_decay", {"num_decay_steps": 4, "num_stable_steps": 4}),
]


@pytest.mark.parametrize(("schedule", "kwargs"), SCHEDULES, ids=[s for s, _ in SCHEDULES])
def test_every_lr_scheduler_type_logs_transformers_learning_rates(tmp_path, schedule, kwargs):
    """The learning rate logged at every step equals transformers' (1e-7)."""
    with contextlib.ExitStack() as warned:
        if schedule == "warmup_stable_decay":  # both say that num_stable_steps wins over the run's length
            warned.enter_context(pytest.warns(UserWarning, match="num_stable_steps are given"))  # ours
            warned.enter_context(pytest.warns(UserWarning, match="num_stable_steps are specified"))  # theirs
        runs = run_both(
            lambda name: RegressionModel(),
            regression_data(48),
            tmp_path,
            per_device_train_batch_size=4,
            max_steps=12,
            warmup_steps=3,
            logging_steps=1,
            learning_rate=0.01,
            lr_scheduler_type=schedule,
            lr_scheduler_kwargs=kwargs or {},
        )
    theirs = [h["learning_rate"] for h in step_logs(runs["hf"])]
    ours = [h["learning_rate"] for h in step_logs(runs["ours"])]
    assert len(ours) == 12
    torch.testing.assert_close(ours, theirs, atol=1e-7, rtol=0)


class _Recorder:
    def __init__(self, lib):
        events = [name for name in dir(lib.TrainerCallback) if name.startswith("on_")]
        self.seen: list[str] = []
        self.kwargs: dict[str, set[str]] = {}
        base = type("Recorder", (lib.TrainerCallback,), {})
        for event in events:
            setattr(base, event, self._make(event))
        self.callback = base()

    def _make(self, event):
        def handler(_self, args, state, control, **kwargs):
            self.seen.append(event)
            self.kwargs.setdefault(event, set()).update(kwargs)

        return handler


def test_callback_event_sequence_equals_transformers(tmp_path):
    """A short run (GA 2, two epochs, eval and save off) fires the same events, in order, with the same kwargs."""
    import transformers

    recorded = {}
    for name, lib in (("hf", transformers), ("ours", hf_lightning)):
        rec = _Recorder(lib)
        args = lib.TrainingArguments(
            output_dir=str(tmp_path / name),
            **BASE_ARGS,
            per_device_train_batch_size=4,
            gradient_accumulation_steps=2,
            num_train_epochs=2,
            logging_steps=2,
        )
        trainer = lib.Trainer(
            model=RegressionModel(), args=args, train_dataset=regression_data(24), callbacks=[rec.callback]
        )
        trainer.train()
        recorded[name] = rec
    assert recorded["ours"].seen == recorded["hf"].seen
    for event, keys in recorded["hf"].kwargs.items():
        assert recorded["ours"].kwargs[event] == keys, event


def test_control_should_training_stop_is_honoured(tmp_path):
    """A callback that sets should_training_stop at step 3 stops training there."""

    class StopAt3(hf_lightning.TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step == 3:
                control.should_training_stop = True

    args = hf_lightning.TrainingArguments(
        output_dir=str(tmp_path),
        **BASE_ARGS,
        per_device_train_batch_size=4,
        num_train_epochs=3,
        logging_steps=1,
    )
    trainer = hf_lightning.Trainer(
        model=RegressionModel(), args=args, train_dataset=regression_data(40), callbacks=[StopAt3()]
    )
    out = trainer.train()
    assert out.global_step == 3
    assert [h["step"] for h in step_logs(trainer)] == [1, 2, 3]


def test_compute_loss_func_receives_transformers_num_items(tmp_path):
    """compute_loss_func gets the same num_items_in_batch per micro-batch as transformers gives it."""
    seen = {"hf": [], "ours": []}

    def make_loss(name):
        def loss_fn(outputs, labels, num_items_in_batch=None):
            seen[name].append(int(num_items_in_batch))
            logits = outputs.logits[..., :-1, :].reshape(-1, outputs.logits.shape[-1])
            target = labels[..., 1:].reshape(-1)
            return (
                torch.nn.functional.cross_entropy(logits, target, ignore_index=-100, reduction="sum")
                / num_items_in_batch
            )

        return loss_fn

    import transformers

    for name, lib in (("hf", transformers), ("ours", hf_lightning)):
        args = lib.TrainingArguments(
            output_dir=str(tmp_path / name),
            **BASE_ARGS,
            per_device_train_batch_size=2,
            gradient_accumulation_steps=3,
            max_steps=3,
            logging_steps=1,
        )
        trainer = lib.Trainer(
            model=tiny_gpt2(fix_hf_count=name == "hf"),
            args=args,
            train_dataset=causal_lm_data(n=18),
            compute_loss_func=make_loss(name),
        )
        trainer.train()
    assert seen["ours"] == seen["hf"] and len(seen["ours"]) == 9


def test_custom_loss_changes_training(tmp_path):
    """A compute_loss_func that doubles the loss doubles the first loss and, with SGD, changes the updates."""

    def double(outputs, labels, num_items_in_batch=None):
        return 2 * torch.nn.functional.mse_loss(outputs[0], labels)  # labels were popped: outputs = (y,)

    def run(loss_fn):
        args = hf_lightning.TrainingArguments(
            output_dir=str(tmp_path),
            **BASE_ARGS,
            per_device_train_batch_size=4,
            max_steps=3,
            logging_steps=1,
            optim="sgd",
            learning_rate=0.1,
            max_grad_norm=0.0,
        )
        trainer = hf_lightning.Trainer(
            model=RegressionModel(), args=args, train_dataset=regression_data(16), compute_loss_func=loss_fn
        )
        trainer.train()
        return [h["loss"] for h in step_logs(trainer)]

    plain, doubled = run(None), run(double)
    assert doubled[0] == pytest.approx(2 * plain[0], rel=1e-5)
    assert doubled[1:] != pytest.approx([2 * x for x in plain[1:]], rel=1e-3)


def test_subclass_compute_loss_override_is_used(tmp_path):
    """A Trainer subclass overriding compute_loss (as the spec invites) changes training."""
    calls = []

    class MyTrainer(hf_lightning.Trainer):
        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            calls.append(num_items_in_batch)
            outputs = model(input_x=inputs["input_x"])
            loss = torch.nn.functional.l1_loss(outputs[0], inputs["labels"])
            return (loss, outputs) if return_outputs else loss

    args = hf_lightning.TrainingArguments(
        output_dir=str(tmp_path), **BASE_ARGS, per_device_train_batch_size=4, max_steps=2, logging_steps=1
    )
    trainer = MyTrainer(model=RegressionModel(), args=args, train_dataset=regression_data(16))
    trainer.train()
    assert len(calls) == 2
    first = regression_data(16)
    assert step_logs(trainer)[0]["loss"] > 0 and len(first) == 16


def test_subclass_training_step_with_accelerator_backward(tmp_path):
    """An overridden training_step that calls self.accelerator.backward trains as the default does."""

    class MyTrainer(hf_lightning.Trainer):
        def training_step(self, model, inputs, num_items_in_batch=None):
            loss = self.compute_loss(model, inputs, num_items_in_batch=num_items_in_batch)
            self.accelerator.backward(loss)
            return loss.detach()

    def run(cls):
        args = hf_lightning.TrainingArguments(
            output_dir=str(tmp_path),
            **BASE_ARGS,
            per_device_train_batch_size=4,
            max_steps=3,
            logging_steps=1,
            learning_rate=0.05,
        )
        trainer = cls(model=RegressionModel(), args=args, train_dataset=regression_data(16))
        trainer.train()
        return trainer

    ours, base = run(MyTrainer), run(hf_lightning.Trainer)
    assert_same_logs(base, ours)


def test_gpt2_item_count_follows_the_docs_not_transformers(tmp_path):
    """Divergence 1: for GPT2LMHeadModel we count shifted labels; transformers counts unshifted ones."""
    seen = {}
    import transformers

    for name, lib in (("hf", transformers), ("ours", hf_lightning)):
        counts = []

        def loss_fn(outputs, labels, num_items_in_batch=None, counts=counts):
            counts.append(int(num_items_in_batch))
            return outputs.logits.float().mean() * 0 + outputs.logits.float().pow(2).mean()

        args = lib.TrainingArguments(
            output_dir=str(tmp_path / name), **BASE_ARGS, per_device_train_batch_size=2, max_steps=1
        )
        data = causal_lm_data(n=2, ragged=False, seq_len=10)
        lib.Trainer(model=tiny_gpt2(), args=args, train_dataset=data, compute_loss_func=loss_fn).train()
        seen[name] = counts
    assert seen["ours"] == [2 * 9]  # shifted: 9 targets per 10-token row
    assert seen["hf"] == [2 * 10]  # transformers' documented-behaviour divergence (docs/divergences.md, 1)


def test_label_smoothing_works_with_plain_module(tmp_path):
    """Divergence 5: label_smoothing_factor with a plain nn.Module trains (transformers raises AttributeError)."""

    class Classifier(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = torch.nn.Linear(4, 3)

        def forward(self, x, labels=None):
            logits = self.linear(x)
            loss = torch.nn.functional.cross_entropy(logits, labels) if labels is not None else None
            return {"loss": loss, "logits": logits}

    g = torch.Generator().manual_seed(0)
    data = [{"x": torch.randn(4, generator=g), "labels": torch.tensor(i % 3)} for i in range(12)]
    args = hf_lightning.TrainingArguments(
        output_dir=str(tmp_path),
        **BASE_ARGS,
        per_device_train_batch_size=4,
        max_steps=2,
        logging_steps=1,
        label_smoothing_factor=0.1,
    )
    trainer = hf_lightning.Trainer(model=Classifier(), args=args, train_dataset=data)
    trainer.train()
    logits = trainer.model(torch.stack([d["x"] for d in data[:4]]))["logits"].detach()
    assert len(step_logs(trainer)) == 2
    labels = torch.tensor([0, 1, 2, 0])
    logp = torch.log_softmax(logits, -1)
    expected = 0.9 * torch.nn.functional.nll_loss(logp, labels) + 0.1 * (-logp.mean())
    assert torch.isfinite(expected)


def test_invariance_batch8_ga1_equals_batch2_ga4(tmp_path):
    """Batch 8 x GA 1 gives the same losses and weights as batch 2 x GA 4 (token-weighted loss)."""

    def run(batch, ga):
        args = hf_lightning.TrainingArguments(
            output_dir=str(tmp_path / f"{batch}"),
            **BASE_ARGS,
            per_device_train_batch_size=batch,
            gradient_accumulation_steps=ga,
            num_train_epochs=2,
            logging_steps=1,
            learning_rate=1e-3,
        )
        trainer = hf_lightning.Trainer(
            model=tiny_gpt2(dropout=0.0), args=args, train_dataset=causal_lm_data(n=24)
        )
        trainer.train()
        return trainer

    big, small = run(8, 1), run(2, 4)
    assert_same_logs(big, small, keys=("loss", "grad_norm", "learning_rate"), rel=1e-4)
    for (name, p), q in zip(big.model.named_parameters(), small.model.parameters()):
        torch.testing.assert_close(p, q, atol=2e-5, rtol=1e-4, msg=name)
