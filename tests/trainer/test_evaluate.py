"""evaluate(), predict() and evaluation during training: the options of the spec, on tiny torch models."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from torch import nn

from hf_lightning import EarlyStoppingCallback, Trainer, TrainerCallback, TrainingArguments
from hf_lightning.trainer.metrics import metrics_format

VOCAB = 11


class TinyLM(nn.Module):
    """Embedding + linear head; returns a dict with loss (when labels are given), logits and hidden states."""

    def __init__(self, with_hidden: bool = False) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.embed = nn.Embedding(VOCAB, 8)
        self.head = nn.Linear(8, VOCAB)
        self.with_hidden = with_hidden

    def forward(self, input_ids, labels=None):
        hidden = self.embed(input_ids)
        logits = self.head(hidden)
        out = {"logits": logits, "hidden": hidden} if self.with_hidden else {"logits": logits}
        if labels is not None:
            out = {"loss": nn.functional.cross_entropy(logits.flatten(0, 1), labels.flatten()), **out}
        return out


def make_data(size: int = 7, with_labels: bool = True) -> list[dict[str, torch.Tensor]]:
    """Sample i has ``2 + i % 3`` tokens: sequence lengths differ between batches."""
    g = torch.Generator().manual_seed(size)
    data = []
    for i in range(size):
        ids = torch.randint(0, VOCAB, (2 + i % 3,), generator=g)
        data.append({"input_ids": ids, "labels": (ids + 1) % VOCAB} if with_labels else {"input_ids": ids})
    return data


def collate(batch):
    """Pads input_ids with 0 and every other key (the labels) with -100."""
    length = max(len(item["input_ids"]) for item in batch)
    out = {key: torch.full((len(batch), length), 0 if key == "input_ids" else -100) for key in batch[0]}
    for row, item in enumerate(batch):
        for key, value in item.items():
            out[key][row, : len(value)] = value
    return out


def accuracy(eval_pred):
    preds, labels = eval_pred.predictions, eval_pred.label_ids
    preds = preds.argmax(-1) if preds.ndim == 3 else preds
    mask = labels != -100
    return {"accuracy": float((preds[mask] == labels[mask]).mean())}


def make_trainer(tmp_path, model=None, compute_metrics=accuracy, callbacks=None, **kwargs) -> Trainer:
    settings = {
        "per_device_eval_batch_size": 3,
        "use_cpu": True,
        "report_to": "none",
        "disable_tqdm": True,
        "save_strategy": "no",
        **kwargs,
    }
    evaluates = settings.get("eval_strategy", "no") != "no"  # Trainer() refuses a strategy without data
    return Trainer(
        model=model or TinyLM(),
        args=TrainingArguments(str(tmp_path), **settings),
        data_collator=collate,
        eval_dataset=make_data(5) if evaluates else None,
        compute_metrics=compute_metrics,
        callbacks=callbacks,
    )


# --- metrics helpers ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "value", "shown"),
    [
        ("eval_mem_cpu_alloc_delta", 3 << 20, "3MB"),
        ("eval_runtime", 3661.5, "1:01:01.50"),
        ("total_flos", 5 << 30, "5GF"),
        ("eval_loss", 1.234567, 1.2346),
        ("epoch", 2, 2),
    ],
)
def test_metrics_format(key, value, shown):
    """Memory in MB, runtimes as H:MM:SS.cc, FLOPs in GF, floats rounded to 4 decimals."""
    assert metrics_format({key: value})[key] == shown


def test_log_metrics_prints_a_sorted_table(tmp_path, capsys):
    """log_metrics prints a header and one aligned line per key, sorted."""
    make_trainer(tmp_path).log_metrics("eval", {"eval_loss": 0.5, "epoch": 1.0})
    lines = capsys.readouterr().out.splitlines()
    assert lines == ["***** eval metrics *****", "  epoch     = 1.0", "  eval_loss = 0.5"]


def test_save_metrics_writes_split_and_merges_all_results(tmp_path):
    """save_metrics writes {split}_results.json and merges into all_results.json."""
    trainer = make_trainer(tmp_path)
    trainer.save_metrics("train", {"train_loss": 1.0})
    trainer.save_metrics("eval", {"eval_loss": 2.0})
    assert json.loads((tmp_path / "eval_results.json").read_text()) == {"eval_loss": 2.0}
    assert json.loads((tmp_path / "all_results.json").read_text()) == {"train_loss": 1.0, "eval_loss": 2.0}


def test_metrics_helpers_are_silent_off_world_zero(tmp_path, capsys, monkeypatch):
    """Processes other than world zero neither print nor write."""
    trainer = make_trainer(tmp_path / "out")
    monkeypatch.setattr(trainer, "is_world_process_zero", lambda: False)
    trainer.log_metrics("eval", {"eval_loss": 1.0})
    trainer.save_metrics("eval", {"eval_loss": 1.0})
    assert capsys.readouterr().out == "" and not (tmp_path / "out" / "eval_results.json").exists()


# --- evaluate / predict -------------------------------------------------------------------


def test_evaluate_returns_transformers_keys(tmp_path):
    """evaluate() returns loss, prefixed metrics, speed metrics and epoch."""
    metrics = make_trainer(tmp_path).evaluate(make_data())
    assert {
        "eval_loss",
        "eval_accuracy",
        "eval_runtime",
        "eval_samples_per_second",
        "eval_steps_per_second",
        "epoch",
    } <= set(metrics)


def test_eval_loss_is_the_per_sample_mean(tmp_path):
    """Each batch's loss weighs as many samples as the batch holds (7 samples in batches of 3, 3, 1)."""
    model, data = TinyLM(), make_data()
    batch_losses = [model(**collate(data[i : i + 3]))["loss"].item() for i in range(0, 7, 3)]
    expected = (3 * batch_losses[0] + 3 * batch_losses[1] + batch_losses[2]) / 7
    loss = make_trainer(tmp_path, model=model, compute_metrics=None).evaluate(data)["eval_loss"]
    assert loss == pytest.approx(expected, rel=1e-6)


def test_evaluate_logs_and_fires_on_evaluate(tmp_path):
    """The metrics are appended to log_history and passed to on_evaluate."""
    seen = {}

    class Spy(TrainerCallback):
        def on_evaluate(self, args, state, control, metrics=None, **kwargs):
            seen.update(metrics)

    trainer = make_trainer(tmp_path, callbacks=[Spy()])
    metrics = trainer.evaluate(make_data())
    assert seen["eval_loss"] == metrics["eval_loss"]
    assert trainer.state.log_history[-1]["eval_loss"] == metrics["eval_loss"]


def test_predict_fires_on_predict_and_a_step_event_per_batch(tmp_path):
    """predict() fires on_prediction_step once per batch and on_predict with the metrics."""
    events = []

    class Spy(TrainerCallback):
        def on_prediction_step(self, args, state, control, **kwargs):
            events.append("step")

        def on_predict(self, args, state, control, metrics, **kwargs):
            events.append(sorted(metrics))

    output = make_trainer(tmp_path, callbacks=[Spy()]).predict(make_data())
    assert events[:3] == ["step"] * 3 and events[3] == sorted(output.metrics)


def test_predict_pads_ragged_lengths_with_minus_100(tmp_path):
    """Predictions and labels of a shorter batch are padded with -100 to the longest sequence."""
    output = make_trainer(tmp_path).predict(make_data())
    assert output.predictions.shape == (7, 4, VOCAB) and output.label_ids.shape == (7, 4)
    assert (output.label_ids[6, 2:] == -100).all() and (output.predictions[6, 2:] == -100).all()


@pytest.mark.parametrize("steps", [1, 3])
def test_eval_accumulation_steps_do_not_change_results(tmp_path, steps):
    """Moving predictions to CPU every n batches gives the same predictions and metrics."""
    reference = make_trainer(tmp_path / "ref").predict(make_data())
    output = make_trainer(tmp_path / "acc", eval_accumulation_steps=steps).predict(make_data())
    np.testing.assert_array_equal(output.predictions, reference.predictions)
    assert output.metrics["test_loss"] == reference.metrics["test_loss"]
    assert output.metrics["test_accuracy"] == reference.metrics["test_accuracy"]


def test_preprocess_logits_for_metrics_runs_per_batch_with_labels(tmp_path):
    """preprocess_logits_for_metrics gets each batch's logits and labels; its result is accumulated."""
    calls = []

    def argmax(logits, labels):
        calls.append((logits.shape[0], None if labels is None else labels.shape[0]))
        return logits.argmax(-1)

    trainer = make_trainer(tmp_path)
    trainer.preprocess_logits_for_metrics = argmax
    output = trainer.predict(make_data())
    assert calls == [(3, 3), (3, 3), (1, 1)] and output.predictions.shape == (7, 4)


def test_preprocess_logits_gets_none_labels_without_labels(tmp_path):
    """Without labels in the data, preprocess_logits_for_metrics is called with labels=None."""
    labels_seen = []
    trainer = make_trainer(tmp_path, compute_metrics=None)
    trainer.preprocess_logits_for_metrics = lambda logits, labels: labels_seen.append(labels) or logits
    output = trainer.predict(make_data(with_labels=False))
    assert labels_seen == [None] * 3 and output.label_ids is None


@pytest.mark.parametrize(
    ("include", "fields"),
    [(["inputs"], ("inputs",)), (["loss"], ("losses",)), (["inputs", "loss"], ("inputs", "losses"))],
)
def test_include_for_metrics_delivers_inputs_and_losses(tmp_path, include, fields):
    """include_for_metrics adds the input ids and the per-sample losses to EvalPrediction."""
    got = {}

    def metrics(eval_pred):
        got.update(inputs=eval_pred.inputs, losses=eval_pred.losses)
        return {}

    make_trainer(tmp_path, compute_metrics=metrics, include_for_metrics=include).evaluate(make_data())
    for name in ("inputs", "losses"):
        assert (got[name] is not None) == (name in fields)
    if "inputs" in fields:
        assert got["inputs"].shape == (7, 4)
    if "losses" in fields:
        assert got["losses"].shape == (7,)


def test_batch_eval_metrics_calls_compute_metrics_per_batch(tmp_path):
    """batch_eval_metrics: compute_metrics(batch, compute_result=False...True); the last result is returned."""
    flags = []

    def metrics(eval_pred, compute_result):
        flags.append(compute_result)
        return {"batches": float(len(flags))}

    trainer = make_trainer(tmp_path, compute_metrics=metrics, batch_eval_metrics=True)
    assert trainer.evaluate(make_data())["eval_batches"] == 3.0
    assert flags == [False, False, True]


def test_batch_eval_metrics_still_returns_predictions_from_predict(tmp_path):
    """predict() keeps the predictions even with batch_eval_metrics."""
    trainer = make_trainer(tmp_path, compute_metrics=lambda p, compute_result: {}, batch_eval_metrics=True)
    assert trainer.predict(make_data()).predictions.shape == (7, 4, VOCAB)


def test_eval_do_concat_batches_false_returns_lists(tmp_path):
    """eval_do_concat_batches=False: predictions and labels are lists, one array per batch."""
    trainer = make_trainer(tmp_path, compute_metrics=None, eval_do_concat_batches=False)
    output = trainer.predict(make_data())
    assert [p.shape[0] for p in output.predictions] == [3, 3, 1]
    assert [label.shape for label in output.label_ids] == [(3, 4), (3, 4), (1, 2)]


def test_prediction_loss_only_returns_no_predictions(tmp_path):
    """prediction_loss_only: only the loss is computed."""
    output = make_trainer(tmp_path, prediction_loss_only=True).predict(make_data())
    assert output.predictions is None and output.label_ids is None and "test_loss" in output.metrics


def test_label_names_name_the_label_keys(tmp_path):
    """label_names picks which inputs are labels (here a model whose label argument is 'target')."""

    class TargetLM(TinyLM):
        def forward(self, input_ids, target=None):
            return super().forward(input_ids, labels=target)

    data = [{"input_ids": item["input_ids"], "target": item["labels"]} for item in make_data()]
    output = make_trainer(tmp_path, model=TargetLM(), label_names=["target"]).predict(data)
    assert output.label_ids.shape == (7, 4) and "test_loss" in output.metrics


@pytest.mark.parametrize(("ignore_keys", "count"), [(None, 2), (["hidden"], 1)])
def test_ignore_keys_leave_outputs_out_of_predictions(tmp_path, ignore_keys, count):
    """Output keys named in ignore_keys are not gathered."""
    trainer = make_trainer(tmp_path, model=TinyLM(with_hidden=True), compute_metrics=None)
    output = trainer.predict(make_data(), ignore_keys=ignore_keys)
    assert (len(output.predictions) if count > 1 else 1) == count
    if count == 1:
        assert output.predictions.shape == (7, 4, VOCAB)


def test_dict_of_eval_datasets_prefixes_each(tmp_path):
    """A dict of eval datasets gives eval_{name}_ keys for each."""
    trainer = make_trainer(tmp_path)
    trainer.eval_dataset = {"a": make_data(4), "b": make_data(5)}
    metrics = trainer.evaluate()
    assert {"eval_a_loss", "eval_b_loss", "eval_a_accuracy", "eval_b_accuracy"} <= set(metrics)


def test_get_eval_dataloader_by_name(tmp_path):
    """get_eval_dataloader('name') uses that dataset of the dict; an unknown name lists the choices."""
    trainer = make_trainer(tmp_path)
    trainer.eval_dataset = {"a": make_data(4), "b": make_data(5)}
    assert len(trainer.get_eval_dataloader("b").dataset) == 5
    with pytest.raises(ValueError, match="choose one of: 'a', 'b'"):
        trainer.get_eval_dataloader("c")
    with pytest.raises(
        KeyError
    ):  # transformers' dict lookup raises KeyError: `except KeyError` keeps working
        trainer.evaluate(eval_dataset="c")


def test_evaluate_without_dataset_raises(tmp_path):
    """evaluate() without any eval dataset raises a ValueError."""
    with pytest.raises(ValueError, match="requires an eval_dataset"):
        make_trainer(tmp_path).evaluate()


def test_bf16_full_eval_casts_the_model(tmp_path):
    """bf16_full_eval: a standalone evaluation runs the model in bfloat16."""
    trainer = make_trainer(tmp_path, bf16_full_eval=True)
    output = trainer.predict(make_data())
    assert trainer.model.head.weight.dtype == torch.bfloat16
    assert output.predictions.dtype == np.float32  # bfloat16 becomes float32 in NumPy


def test_bf16_mixed_precision_evaluation_autocasts(tmp_path):
    """bf16=True: a standalone evaluation runs under bfloat16 autocast, the weights stay float32."""
    dtypes = []
    trainer = make_trainer(tmp_path, bf16=True)
    trainer.preprocess_logits_for_metrics = lambda logits, labels: dtypes.append(logits.dtype) or logits
    trainer.predict(make_data())
    assert dtypes[0] == torch.bfloat16 and trainer.model.head.weight.dtype == torch.float32


# --- best metric --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "greater", "values", "best"),
    [
        ("loss", False, [3.0, 2.0, 2.5], 2.0),
        ("eval_accuracy", True, [0.1, 0.3, 0.2], 0.3),
        ("accuracy", None, [0.5, 0.4], 0.5),
    ],
)
def test_determine_best_metric(tmp_path, name, greater, values, best):
    """best_metric follows metric_for_best_model (with or without eval_) in greater_is_better's direction."""
    trainer = make_trainer(
        tmp_path, metric_for_best_model=name, greater_is_better=greater, eval_strategy="steps"
    )
    key = name if name.startswith("eval_") else f"eval_{name}"
    news = []
    for step, value in enumerate(values, start=1):
        trainer.state.global_step = step
        news.append(trainer._determine_best_metric({key: value}, trial=None))
    assert trainer.state.best_metric == best
    assert news[0] is True and trainer.state.best_global_step is None  # save_strategy="no"


@pytest.mark.parametrize("save_strategy", ["steps", "epoch", "best"])
def test_best_global_step_is_kept_when_checkpoints_are_saved(tmp_path, save_strategy):
    """With a saving strategy, the step of the best metric is kept for the checkpoint code."""
    trainer = make_trainer(tmp_path, metric_for_best_model="loss", eval_strategy="steps")
    trainer.args.save_strategy = save_strategy
    trainer.state.global_step = 4
    assert trainer._determine_best_metric({"eval_loss": 1.0}, trial=None)
    assert trainer.state.best_global_step == 4


def test_missing_best_metric_names_the_argument(tmp_path):
    """A metric_for_best_model that evaluation did not return raises a KeyError naming it and the choices."""
    trainer = make_trainer(tmp_path, metric_for_best_model="bleu", eval_strategy="steps")
    with pytest.raises(
        KeyError, match=r"`metric_for_best_model` training argument is set to 'eval_bleu'.*eval_loss"
    ):
        trainer._determine_best_metric({"eval_loss": 1.0}, trial=None)


# --- during training ----------------------------------------------------------------------


def train(tmp_path, callbacks=None, **kwargs) -> Trainer:
    settings = {
        "per_device_train_batch_size": 2,
        "learning_rate": 0.05,
        "logging_steps": 1,
        "max_steps": 6,
        **kwargs,
    }
    trainer = make_trainer(tmp_path, callbacks=callbacks, **settings)
    trainer.train_dataset, trainer.eval_dataset = make_data(8), make_data(5)
    trainer.train()
    return trainer


def _eval_steps(trainer):
    return [entry["step"] for entry in trainer.state.log_history if "eval_loss" in entry]


@pytest.mark.parametrize(
    ("settings", "steps"),
    [
        ({"eval_strategy": "steps", "eval_steps": 2}, [2, 4, 6]),
        ({"eval_strategy": "steps", "eval_steps": 4}, [4, 6]),
        ({"eval_strategy": "steps", "eval_steps": 0.5}, [3, 6]),
        ({"eval_strategy": "steps", "eval_steps": 2, "eval_delay": 3}, [4, 6]),
        ({"eval_strategy": "epoch", "eval_on_start": True}, [0, 4, 6]),
        ({"eval_strategy": "no"}, []),
    ],
)
def test_evaluation_during_training_at_the_strategy_steps(tmp_path, settings, steps):
    """eval_strategy / eval_steps / eval_delay / eval_on_start put the evaluations at these steps."""
    assert _eval_steps(train(tmp_path, **settings)) == steps


def test_early_stopping_stops_training(tmp_path):
    """EarlyStoppingCallback stops when the metric stops improving (accuracy cannot rise above 1)."""
    trainer = train(
        tmp_path,
        callbacks=[EarlyStoppingCallback(early_stopping_patience=1)],
        max_steps=40,
        eval_strategy="steps",
        eval_steps=1,
        metric_for_best_model="accuracy",
    )
    assert trainer.state.global_step < 40
    history = [e["eval_accuracy"] for e in trainer.state.log_history if "eval_accuracy" in e]
    assert history[-1] <= max(history[:-1])


def test_reduce_lr_on_plateau_steps_with_the_metric(tmp_path):
    """A ReduceLROnPlateau scheduler is stepped with metric_for_best_model after each evaluation."""
    stepped = []
    model = TinyLM()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer)
    scheduler.step = stepped.append
    trainer = make_trainer(
        tmp_path,
        model=model,
        per_device_train_batch_size=2,
        max_steps=4,
        eval_strategy="steps",
        eval_steps=2,
        metric_for_best_model="loss",
    )
    trainer.optimizer, trainer.lr_scheduler = optimizer, scheduler
    trainer.train_dataset, trainer.eval_dataset = make_data(8), make_data(5)
    trainer.train()
    losses = [e["eval_loss"] for e in trainer.state.log_history if "eval_loss" in e]
    assert stepped == losses


def test_evaluation_is_reported_to_a_hyperparameter_search(tmp_path, monkeypatch):
    """_evaluate reports (trial, step, metrics) to _report_to_hp_search when the Trainer has it."""
    reports = []
    trainer = make_trainer(tmp_path)
    trainer.eval_dataset = make_data()
    trainer._report_to_hp_search = lambda trial, step, metrics: reports.append(
        (trial, step, metrics["eval_loss"])
    )
    metrics = trainer._evaluate("trial", None)
    assert reports == [("trial", 0, metrics["eval_loss"])]


def test_metric_for_best_model_may_name_one_of_several_datasets(tmp_path):
    """With a dict of eval datasets, metric_for_best_model='eval_b_loss' tracks dataset b."""
    trainer = make_trainer(
        tmp_path,
        per_device_train_batch_size=2,
        max_steps=2,
        eval_strategy="steps",
        eval_steps=1,
        metric_for_best_model="eval_b_loss",
        logging_steps=1,
    )
    trainer.train_dataset, trainer.eval_dataset = make_data(8), {"a": make_data(4), "b": make_data(5)}
    trainer.train()
    b_losses = [e["eval_b_loss"] for e in trainer.state.log_history if "eval_b_loss" in e]
    assert trainer.state.best_metric == min(b_losses)


def test_evaluation_out_of_memory_is_not_left_to_the_batch_size_finder(tmp_path, monkeypatch):
    """With auto_find_batch_size, an out-of-memory evaluation says to lower per_device_eval_batch_size."""
    trainer = make_trainer(tmp_path, auto_find_batch_size=True)
    trainer.eval_dataset = make_data()

    def out_of_memory(*args, **kwargs):
        raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")

    monkeypatch.setattr(trainer, "evaluate", out_of_memory)
    with pytest.raises(RuntimeError, match="reduce `per_device_eval_batch_size`"):
        trainer._evaluate(None, None)
