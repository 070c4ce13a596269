"""Parity of evaluate(), predict() and evaluation during training with transformers.Trainer 5.24.

Both sides get the same tiny GPT-2 (built from a config, with ``loss_type="ForCausalLM"`` so that
transformers counts the shifted labels as we do; docs/divergences.md, divergence 1), the same data — sequence
lengths that differ between batches and a final partial batch — and the same arguments.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import transformers
from transformers import GPT2Config, GPT2LMHeadModel

import hf_lightning

LIBS = {"theirs": transformers, "ours": hf_lightning}


def gpt2() -> GPT2LMHeadModel:
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=64, n_head=2, vocab_size=256, n_positions=32))
    model.loss_type = "ForCausalLM"
    return model


def make_data(size: int = 10, seed: int = 0) -> list[dict[str, torch.Tensor]]:
    """Sample i has ``4 + i % 5`` tokens; a few label positions are -100."""
    g = torch.Generator().manual_seed(seed)
    data = []
    for i in range(size):
        ids = torch.randint(0, 256, (4 + i % 5,), generator=g)
        labels = ids.clone()
        labels[: i % 2] = -100
        data.append({"input_ids": ids, "labels": labels})
    return data


def collate(batch):
    length = max(len(item["input_ids"]) for item in batch)
    ids = torch.zeros(len(batch), length, dtype=torch.long)
    labels = torch.full((len(batch), length), -100)
    for row, item in enumerate(batch):
        ids[row, : len(item["input_ids"])] = item["input_ids"]
        labels[row, : len(item["labels"])] = item["labels"]
    return {"input_ids": ids, "labels": labels}


def accuracy(eval_pred):
    preds, labels = eval_pred.predictions, eval_pred.label_ids
    preds = preds.argmax(-1) if preds.ndim == 3 else preds
    mask = labels[:, 1:] != -100
    return {"accuracy": float((preds[:, :-1][mask] == labels[:, 1:][mask]).mean())}


def make_trainer(
    lib_name,
    tmp_path,
    compute_metrics=accuracy,
    callbacks=None,
    train_data=None,
    eval_data=None,
    preprocess=None,
    **kwargs,
):
    lib = LIBS[lib_name]
    settings = {
        "per_device_eval_batch_size": 4,
        "use_cpu": True,
        "report_to": "none",
        "disable_tqdm": True,
        "save_strategy": "no",
        **kwargs,
    }
    args = lib.TrainingArguments(str(tmp_path / lib_name), **settings)
    return lib.Trainer(
        model=gpt2(),
        args=args,
        data_collator=collate,
        compute_metrics=compute_metrics,
        callbacks=callbacks,
        train_dataset=train_data,
        eval_dataset=eval_data,
        preprocess_logits_for_metrics=preprocess,
    )


def both(tmp_path, run, **kwargs):
    """``run(trainer)`` on transformers' Trainer and on ours."""
    return {name: run(make_trainer(name, tmp_path, **kwargs)) for name in LIBS}


def assert_same_arrays(theirs, ours, atol=1e-5):
    """Equal structure and shapes; equal integers (the -100 padding included), floats within atol."""
    if isinstance(theirs, (list, tuple)):
        assert type(ours) is type(theirs) and len(ours) == len(theirs)
        for a, b in zip(theirs, ours):
            assert_same_arrays(a, b, atol)
        return
    assert ours.shape == theirs.shape and ours.dtype == theirs.dtype
    np.testing.assert_array_equal(ours == -100, theirs == -100)
    np.testing.assert_allclose(ours, theirs, atol=atol, rtol=0)


def assert_same_metrics(theirs, ours):
    assert set(ours) == set(theirs)
    for key, value in theirs.items():
        if "runtime" in key or "per_second" in key or "preparation_time" in key:
            continue
        assert ours[key] == pytest.approx(value, abs=1e-5), key


def test_evaluate_metrics_match(tmp_path):
    """evaluate() gives the same keys and values (loss within 1e-5)."""
    results = both(tmp_path, lambda t: t.evaluate(make_data()))
    assert_same_metrics(results["theirs"], results["ours"])


def test_predict_matches(tmp_path):
    """predict() gives equal predictions and labels, -100 padding identical, and the same metrics."""
    results = both(tmp_path, lambda t: t.predict(make_data()))
    theirs, ours = results["theirs"], results["ours"]
    assert_same_arrays(theirs.predictions, ours.predictions)
    assert_same_arrays(theirs.label_ids, ours.label_ids)
    assert_same_metrics(theirs.metrics, ours.metrics)


def test_evaluate_and_predict_agree(tmp_path):
    """On the same model and data, evaluate() and predict() report the same loss and metrics."""
    trainer = make_trainer("ours", tmp_path)
    metrics, output = trainer.evaluate(make_data()), trainer.predict(make_data())
    assert metrics["eval_loss"] == output.metrics["test_loss"]
    assert metrics["eval_accuracy"] == output.metrics["test_accuracy"]


@pytest.mark.parametrize("steps", [None, 1, 3])
def test_eval_accumulation_steps_match(tmp_path, steps):
    """eval_accumulation_steps None, 1 and 3 give transformers' predictions and metrics."""
    results = both(tmp_path, lambda t: t.predict(make_data()), eval_accumulation_steps=steps)
    assert_same_arrays(results["theirs"].predictions, results["ours"].predictions)
    assert_same_metrics(results["theirs"].metrics, results["ours"].metrics)


def test_preprocess_logits_for_metrics_matches(tmp_path):
    """preprocess_logits_for_metrics (argmax) shrinks the predictions to transformers' shape and values."""
    results = both(
        tmp_path, lambda t: t.predict(make_data()), preprocess=lambda logits, labels: logits.argmax(-1)
    )
    assert results["ours"].predictions.shape == (10, 8)
    assert_same_arrays(results["theirs"].predictions, results["ours"].predictions)
    assert_same_metrics(results["theirs"].metrics, results["ours"].metrics)


def test_include_for_metrics_matches(tmp_path):
    """include_for_metrics=['inputs', 'loss'] delivers the same inputs and per-sample losses."""
    seen = {}

    def metrics_for(name):
        def compute(eval_pred):
            seen[name] = (eval_pred.inputs, eval_pred.losses)
            return {}

        return compute

    for name in LIBS:
        trainer = make_trainer(
            name, tmp_path, compute_metrics=metrics_for(name), include_for_metrics=["inputs", "loss"]
        )
        trainer.evaluate(make_data())
    assert_same_arrays(seen["theirs"][0], seen["ours"][0])
    assert_same_arrays(seen["theirs"][1], seen["ours"][1])


def test_batch_eval_metrics_matches(tmp_path):
    """batch_eval_metrics: the same calls (compute_result False...True) on batches of the same shapes."""
    calls = {name: [] for name in LIBS}

    def metrics_for(name):
        def compute(eval_pred, compute_result):
            calls[name].append(
                (compute_result, tuple(eval_pred.predictions.shape), tuple(eval_pred.label_ids.shape))
            )
            return {"n": float(len(calls[name]))}

        return compute

    metrics = {
        name: make_trainer(
            name, tmp_path, compute_metrics=metrics_for(name), batch_eval_metrics=True
        ).evaluate(make_data())
        for name in LIBS
    }
    assert calls["ours"] == calls["theirs"] and calls["ours"][-1][0] is True
    assert_same_metrics(metrics["theirs"], metrics["ours"])


def test_eval_do_concat_batches_false_matches(tmp_path):
    """eval_do_concat_batches=False: the same list of per-batch arrays."""
    results = both(
        tmp_path, lambda t: t.predict(make_data()), compute_metrics=None, eval_do_concat_batches=False
    )
    assert_same_arrays(results["theirs"].predictions, results["ours"].predictions)
    assert_same_arrays(results["theirs"].label_ids, results["ours"].label_ids)


def test_dict_of_eval_datasets_matches(tmp_path):
    """A dict of eval datasets gives transformers' eval_{name}_ keys and values."""
    datasets = {"short": make_data(5, seed=1), "long": make_data(9, seed=2)}
    results = both(tmp_path, lambda t: t.evaluate(datasets))
    assert_same_metrics(results["theirs"], results["ours"])


def _eval_entries(trainer):
    history = trainer.state.log_history
    return [
        (index, entry["step"], entry["epoch"], round(entry["eval_loss"], 5))
        for index, entry in enumerate(history)
        if "eval_loss" in entry
    ]


@pytest.mark.parametrize(
    "settings",
    [
        {"eval_strategy": "steps", "eval_steps": 2, "eval_delay": 3, "eval_on_start": True, "max_steps": 7},
        {"eval_strategy": "epoch", "num_train_epochs": 3, "eval_on_start": True},
        {"eval_strategy": "steps", "eval_steps": 0.25, "max_steps": 8},
        {"eval_strategy": "epoch", "eval_delay": 2, "num_train_epochs": 3},
    ],
    ids=["steps-delay-start", "epoch-start", "ratio", "epoch-delay"],
)
def test_evaluations_during_training_match(tmp_path, settings):
    """The evaluation entries of log_history sit at the same positions and steps, with the same losses."""

    def run(trainer):
        trainer.train()
        return _eval_entries(trainer)

    results = both(
        tmp_path,
        run,
        train_data=make_data(12),
        eval_data=make_data(6, seed=1),
        per_device_train_batch_size=4,
        learning_rate=1e-3,
        logging_steps=1,
        **settings,
    )
    assert results["ours"] == results["theirs"]


def test_early_stopping_matches(tmp_path):
    """EarlyStoppingCallback stops training at the same step as transformers'."""

    def run(trainer):
        trainer.train()
        return trainer.state.global_step, _eval_entries(trainer)

    results = {}
    for name in LIBS:
        callback = LIBS[name].EarlyStoppingCallback(early_stopping_patience=2, early_stopping_threshold=0.01)
        trainer = make_trainer(
            name,
            tmp_path,
            callbacks=[callback],
            train_data=make_data(12),
            eval_data=make_data(6, seed=1),
            per_device_train_batch_size=4,
            learning_rate=1e-3,
            max_steps=30,
            eval_strategy="steps",
            eval_steps=1,
            metric_for_best_model="loss",
        )
        results[name] = run(trainer)
    assert results["ours"] == results["theirs"]
    assert results["ours"][0] < 30


def test_hf_module_validation_and_test_loss_equal_transformers_eval_loss(tmp_path):
    """A plain lightning.Trainer validating or testing an HFModule logs ``eval_loss`` / ``test_loss``:
    transformers' eval_loss (mean over samples, here with a final partial batch of 2 of 10)."""
    import lightning as L

    from hf_lightning.adapters import HFModule

    data = make_data(10)
    theirs = make_trainer("theirs", tmp_path, compute_metrics=None).evaluate(data)["eval_loss"]
    loader = torch.utils.data.DataLoader(data, batch_size=4, collate_fn=collate)
    trainer = L.Trainer(
        accelerator="cpu", logger=False, enable_progress_bar=False, enable_model_summary=False
    )
    module = HFModule(gpt2(), hf_lightning.TrainingArguments(str(tmp_path / "lit")))
    (validated,) = trainer.validate(module, loader, verbose=False)
    (tested,) = trainer.test(module, loader, verbose=False)
    assert validated["eval_loss"] == pytest.approx(theirs, rel=1e-5)
    assert tested["test_loss"] == pytest.approx(theirs, rel=1e-5)


class RecordingGPT2(GPT2LMHeadModel):
    """GPT-2 that records the extra keyword arguments of each forward (and computes its logits anyway)."""

    def forward(self, input_ids=None, labels=None, **kwargs):
        self.calls.append(sorted(kwargs))
        kwargs.pop("skip_logits", None)  # without Liger kernels the logits are computed all the same
        return super().forward(input_ids=input_ids, labels=labels, **kwargs)


@pytest.mark.parametrize("metrics", [None, accuracy])
def test_liger_loss_only_evaluation_passes_skip_logits_as_transformers(tmp_path, metrics):
    """use_liger_kernel=True: the model gets ``skip_logits=True`` exactly when only the loss is wanted
    (``evaluate()`` without ``compute_metrics``), as transformers passes it."""
    seen = {}
    for name, lib in LIBS.items():
        torch.manual_seed(0)
        model = RecordingGPT2(GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=256, n_positions=32))
        model.loss_type, model.calls = "ForCausalLM", []
        args = lib.TrainingArguments(
            output_dir=str(tmp_path / name),
            report_to="none",
            use_cpu=True,
            per_device_eval_batch_size=4,
            use_liger_kernel=True,
        )
        trainer = lib.Trainer(model=model, args=args, data_collator=collate, compute_metrics=metrics)
        trainer.evaluate(make_data(8))
        seen[name] = model.calls[-2:]  # the two evaluation batches (ours probes the loss rule before them)
    assert seen["ours"] == seen["theirs"]
    assert all(("skip_logits" in kwargs) is (metrics is None) for kwargs in seen["ours"])


class PerSampleOutputs(torch.nn.Module):
    """Outputs a tuple with one entry per sample of the batch (as Qwen2-VL's per-image outputs; DETR's labels
    are such a list), so its length changes at a partial last batch."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.lin = torch.nn.Linear(4, 2)

    def forward(self, x, labels=None):
        logits = self.lin(x)
        loss = None if labels is None else torch.nn.functional.cross_entropy(logits, labels)
        return {"loss": loss, "logits": logits, "per_sample": tuple(logits[i : i + 1] for i in range(len(x)))}


def test_outputs_whose_list_length_changes_between_batches_match(tmp_path):
    """A list output that is shorter in the partial last batch is kept as transformers keeps it (as long as
    the shortest batch's), not a crash."""
    ours, theirs = _predict_five_in_batches_of_three(tmp_path, PerSampleOutputs)
    assert len(ours.predictions[1]) == len(theirs.predictions[1]) == 2
    for a, b in zip(_leaves_of(ours.predictions), _leaves_of(theirs.predictions)):
        np.testing.assert_allclose(a, b, rtol=1e-6)
    assert ours.metrics.keys() == theirs.metrics.keys()


def _predict_five_in_batches_of_three(tmp_path, model_cls) -> tuple:
    """(hf_lightning's, transformers') ``predict`` of ``model_cls()`` on 5 samples in batches of 3."""
    data = [
        {"x": torch.randn(4, generator=torch.Generator().manual_seed(i)), "labels": i % 2} for i in range(5)
    ]
    found = {}
    for lib in (transformers, hf_lightning):
        args = lib.TrainingArguments(str(tmp_path / lib.__name__), per_device_eval_batch_size=3, report_to="none",
                                     use_cpu=True, disable_tqdm=True)  # fmt: skip
        found[lib.__name__] = lib.Trainer(model=model_cls(), args=args).predict(data)
    return found["hf_lightning"], found["transformers"]


def _leaves_of(value):
    if isinstance(value, (list, tuple)):
        return [leaf for item in value for leaf in _leaves_of(item)]
    return [value]


class TwoRowsPerSample(PerSampleOutputs):
    """An output that is not batch-first: two rows per sample (as a vision model's per-patch outputs)."""

    def forward(self, x, labels=None):
        outputs = super().forward(x, labels)
        return {
            "loss": outputs["loss"],
            "logits": outputs["logits"],
            "patches": outputs["logits"].repeat(2, 1),
        }


def test_outputs_that_are_not_batch_first_keep_every_row(tmp_path):
    """On one process every row of an output is kept (10 rows for 5 samples); transformers cuts the last
    batch's outputs to its number of samples (4 rows to 2: 8 in all), losing rows that are not per-sample
    (divergences.md)."""
    ours, theirs = (
        output.predictions for output in _predict_five_in_batches_of_three(tmp_path, TwoRowsPerSample)
    )
    assert ours[1].shape == (10, 2) and theirs[1].shape == (8, 2)
    np.testing.assert_allclose(ours[0], theirs[0], rtol=1e-6)


class ScalarAuxOutput(PerSampleOutputs):
    """A scalar output beside the logits, as a MoE model's ``aux_loss`` with ``output_router_logits=True``."""

    def forward(self, x, labels=None):
        outputs = super().forward(x, labels)
        return {
            "loss": outputs["loss"],
            "aux_loss": outputs["logits"].square().mean(),
            "logits": outputs["logits"],
        }


@pytest.mark.parametrize("samples", [3, 5], ids=["one-batch", "two-batches"])
def test_a_scalar_output_has_transformers_shape(tmp_path, samples):
    """One evaluation batch: the scalar stays 0-d (transformers keeps a lone batch as it is); several: one
    value per batch."""
    data = [
        {"x": torch.randn(4, generator=torch.Generator().manual_seed(i)), "labels": i % 2}
        for i in range(samples)
    ]
    found = []
    for lib in (transformers, hf_lightning):
        args = lib.TrainingArguments(str(tmp_path / lib.__name__), per_device_eval_batch_size=3, report_to="none",
                                     use_cpu=True, disable_tqdm=True)  # fmt: skip
        found.append(lib.Trainer(model=ScalarAuxOutput(), args=args).predict(data).predictions)
    theirs, ours = found
    assert [np.shape(p) for p in ours] == [np.shape(p) for p in theirs]
    assert np.shape(ours[0]) == (() if samples == 3 else (2,))
    for a, b in zip(ours, theirs):
        np.testing.assert_allclose(a, b, rtol=1e-6)


@pytest.mark.parametrize("scheduler", [None, "reduce_lr_on_plateau"])
def test_a_missing_metric_for_best_model_raises_transformers_key_error(tmp_path, scheduler):
    """Training with a metric_for_best_model evaluation does not return: the same KeyError, the same words,
    chained from the lookup's KeyError, and the same files left behind."""
    raised = {}
    for name in LIBS:
        extra = {"lr_scheduler_type": scheduler} if scheduler else {"load_best_model_at_end": True}
        trainer = make_trainer(name, tmp_path, train_data=make_data(8), eval_data=make_data(4, seed=1),
                               per_device_train_batch_size=4, max_steps=2, eval_strategy="steps", eval_steps=1,
                               save_strategy="steps", save_steps=1, metric_for_best_model="bleu", **extra)  # fmt: skip
        with pytest.raises(KeyError) as info:
            trainer.train()
        raised[name] = (str(info.value), type(info.value.__cause__), trainer.state.global_step)
    assert raised["ours"] == raised["theirs"]
    assert "'eval_bleu'" in raised["ours"][0] and raised["ours"][1] is KeyError
