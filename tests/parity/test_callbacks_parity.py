"""Parity of the callback vocabulary with transformers 5.24: state files, flow decisions, early stopping, handler."""

from __future__ import annotations

import dataclasses
import enum
import json
import math
import types

import pytest
import transformers
import transformers.trainer_callback as theirs

import hf_lightning.callbacks as ours

_FLOW_FIELDS = (
    "logging_strategy",
    "logging_steps",
    "logging_first_step",
    "eval_strategy",
    "eval_steps",
    "eval_delay",
    "save_strategy",
    "save_steps",
    "load_best_model_at_end",
    "metric_for_best_model",
    "greater_is_better",
)


def _their_args(tmp_path, **kwargs):
    return transformers.TrainingArguments(output_dir=str(tmp_path), report_to="none", **kwargs)


def _plain(value):
    return value.value if isinstance(value, enum.Enum) else value


def _our_args(kind, tmp_path, their_args, **kwargs):
    """Our side's arguments: our TrainingArguments, or a namespace of plain strings copied from theirs."""
    if kind == "ours":
        from hf_lightning.args.training_args import TrainingArguments

        return TrainingArguments(output_dir=str(tmp_path), **kwargs)
    return types.SimpleNamespace(**{name: _plain(getattr(their_args, name)) for name in _FLOW_FIELDS})


def _flags(control) -> tuple[bool, ...]:
    return tuple(getattr(control, f.name) for f in dataclasses.fields(control))


# --- TrainerState files ---


def _full_state_kwargs() -> dict:
    return {
        "epoch": 2.5,
        "global_step": 40,
        "max_steps": 48,
        "logging_steps": 5,
        "eval_steps": 10,
        "save_steps": 20,
        "train_batch_size": 8,
        "num_train_epochs": 3,
        "num_input_tokens_seen": 12345,
        "total_flos": 6.5e12,
        "log_history": [{"loss": 1.25, "grad_norm": 0.5, "learning_rate": 1e-4, "epoch": 0.1, "step": 5}],
        "best_metric": 0.75,
        "best_global_step": 20,
        "best_model_checkpoint": "out/checkpoint-20",
        "is_local_process_zero": False,
        "is_world_process_zero": False,
        "is_hyper_param_search": True,
        "trial_name": "trial-3",
        "trial_params": {"learning_rate": 1e-4, "seed": 7},
    }


def test_transformers_state_file_loads_with_ours(tmp_path):
    """A trainer_state.json written by transformers loads with ours, every field equal."""
    path = tmp_path / "trainer_state.json"
    callback = theirs.EarlyStoppingCallback(early_stopping_patience=3)
    their_state = theirs.TrainerState(**_full_state_kwargs(), stateful_callbacks=[callback])
    their_state.save_to_json(str(path))
    our_state = ours.TrainerState.load_from_json(str(path))
    assert dataclasses.asdict(our_state) == dataclasses.asdict(their_state)


def test_our_state_file_loads_with_transformers(tmp_path):
    """A trainer_state.json written by us loads with transformers, every field equal, same text."""
    path, their_path = tmp_path / "ours.json", tmp_path / "theirs.json"
    callbacks = [ours.EarlyStoppingCallback(early_stopping_patience=3), ours.TrainerControl()]
    our_state = ours.TrainerState(**_full_state_kwargs(), stateful_callbacks=callbacks)
    our_state.save_to_json(str(path))
    their_state = theirs.TrainerState.load_from_json(str(path))
    assert dataclasses.asdict(their_state) == dataclasses.asdict(our_state)
    their_state.save_to_json(str(their_path))
    assert path.read_text() == their_path.read_text()


def test_state_fields_match_transformers():
    """TrainerState has transformers' fields, in the same order, with the same defaults."""
    assert dataclasses.asdict(ours.TrainerState()) == dataclasses.asdict(theirs.TrainerState())
    assert [f.name for f in dataclasses.fields(ours.TrainerState)] == [
        f.name for f in dataclasses.fields(theirs.TrainerState)
    ]


def test_callback_states_match_transformers():
    """Stateful callbacks are exported under the same keys with the same content."""
    our_cbs = [ours.EarlyStoppingCallback(2, 0.1), ours.EarlyStoppingCallback(4), ours.TrainerControl(True)]
    their_cbs = [
        theirs.EarlyStoppingCallback(2, 0.1),
        theirs.EarlyStoppingCallback(4),
        theirs.TrainerControl(True),
    ]
    our_states = ours.TrainerState(stateful_callbacks=our_cbs).stateful_callbacks
    assert json.dumps(our_states) == json.dumps(
        theirs.TrainerState(stateful_callbacks=their_cbs).stateful_callbacks
    )


@pytest.mark.parametrize(
    "steps", [dict(logging_steps=0.1, eval_steps=0.25, save_steps=0.3), dict(save_steps=7)]
)
@pytest.mark.parametrize("max_steps", [1, 17, 100])
def test_compute_steps_matches_transformers(tmp_path, steps, max_steps):
    """Absolute logging/eval/save steps are resolved as transformers resolves them."""
    args = _their_args(tmp_path, eval_strategy="steps", **steps)
    our_state, their_state = ours.TrainerState(), theirs.TrainerState()
    our_state.compute_steps(args, max_steps)
    their_state.compute_steps(args, max_steps)
    assert dataclasses.asdict(our_state) == dataclasses.asdict(their_state)


# --- DefaultFlowCallback through the handler ---

_FLOW_CASES = {
    "steps-int": (
        dict(logging_steps=2, eval_strategy="steps", eval_steps=3, save_steps=4, max_steps=10),
        4,
        3,
    ),
    "steps-ratio": (
        dict(logging_steps=0.1, eval_strategy="steps", eval_steps=0.25, save_steps=0.3, max_steps=17),
        5,
        4,
    ),
    "first-step": (dict(logging_first_step=True, logging_steps=5, save_strategy="no"), 3, 2),
    "eval-delay-steps": (dict(eval_strategy="steps", eval_steps=2, eval_delay=5, logging_steps=3), 4, 3),
    "epoch": (dict(logging_strategy="epoch", eval_strategy="epoch", save_strategy="epoch"), 3, 3),
    "epoch-delay": (
        dict(logging_strategy="epoch", eval_strategy="epoch", eval_delay=1.5, save_strategy="no"),
        2,
        4,
    ),
    "epoch-delay-exact": (dict(eval_strategy="epoch", eval_delay=2, save_strategy="no"), 2, 4),
    "best": (
        dict(eval_strategy="steps", eval_steps=3, save_strategy="best", metric_for_best_model="loss"),
        4,
        2,
    ),
    "all-no": (dict(logging_strategy="no", eval_strategy="no", save_strategy="no"), 3, 2),
    "save-steps-zero": (dict(save_steps=0, logging_steps=4), 3, 2),
    "fractional-epochs": (
        dict(logging_strategy="epoch", eval_strategy="steps", eval_steps=4, save_steps=3),
        4,
        2.5,
    ),
    "max-steps-mid-epoch": (dict(max_steps=7, eval_strategy="steps", eval_steps=5, save_steps=5), 5, 3),
    "load-best": (
        dict(
            eval_strategy="epoch",
            save_strategy="epoch",
            load_best_model_at_end=True,
            metric_for_best_model="acc",
        ),
        2,
        3,
    ),
}


def _consume(handler, args, state, control):
    """Carry out the requested log / evaluate / save, as the Trainer does after each step and epoch."""
    if control.should_log:
        control = handler.on_log(args, state, control, logs={"loss": 1.0})
    if control.should_evaluate:
        control = handler.on_evaluate(args, state, control, metrics={"eval_loss": 1.0})
    if control.should_save:
        control = handler.on_save(args, state, control)
    return control


def _run_flow(module, args, steps_per_epoch, num_epochs, max_steps) -> list[tuple]:
    """Drive a handler holding only DefaultFlowCallback through a run; return the flags after each event."""
    handler = module.CallbackHandler([module.DefaultFlowCallback], None, None, None, None)
    state, control = module.TrainerState(), module.TrainerControl()
    state.compute_steps(args, max_steps)
    state.max_steps, state.num_train_epochs = max_steps, num_epochs
    record = [("steps", state.logging_steps, state.eval_steps, state.save_steps)]
    control = handler.on_train_begin(args, state, control)
    for epoch in range(math.ceil(num_epochs)):
        control = handler.on_epoch_begin(args, state, control)
        for step in range(steps_per_epoch):
            control = handler.on_step_begin(args, state, control)
            state.global_step += 1
            state.epoch = epoch + (step + 1) / steps_per_epoch
            control = handler.on_step_end(args, state, control)
            record.append(("step", state.global_step, *_flags(control)))
            control = _consume(handler, args, state, control)
            if control.should_epoch_stop or control.should_training_stop:
                break
        control = handler.on_epoch_end(args, state, control)
        record.append(("epoch", epoch, *_flags(control)))
        control = _consume(handler, args, state, control)
        if control.should_training_stop:
            break
    return record


@pytest.mark.parametrize("args_kind", ["namespace", "ours"])
@pytest.mark.parametrize("case", sorted(_FLOW_CASES))
def test_default_flow_matches_transformers(tmp_path, case, args_kind):
    """DefaultFlowCallback sets the same control flags as transformers' at every step and epoch end."""
    kwargs, steps_per_epoch, num_epochs = _FLOW_CASES[case]
    their_args = _their_args(tmp_path, num_train_epochs=num_epochs, **kwargs)
    if case == "save-steps-zero" and args_kind == "ours":  # our TrainingArguments refuse it (divergences.md)
        with pytest.raises(ValueError, match="save_steps=0"):
            _our_args(args_kind, tmp_path, their_args, num_train_epochs=num_epochs, **kwargs)
        return
    our_args = _our_args(args_kind, tmp_path, their_args, num_train_epochs=num_epochs, **kwargs)
    max_steps = their_args.max_steps if their_args.max_steps > 0 else math.ceil(num_epochs * steps_per_epoch)
    expected = _run_flow(theirs, their_args, steps_per_epoch, num_epochs, max_steps)
    assert _run_flow(ours, our_args, steps_per_epoch, num_epochs, max_steps) == expected


# --- EarlyStoppingCallback ---

_EARLY_CASES = {
    "loss-patience-1": ("loss", False, 1, 0.0, [1.0, 0.9, 0.95, 0.8, 0.85]),
    "loss-patience-2": ("eval_loss", False, 2, 0.0, [1.0, 1.1, 0.9, 0.95, 0.97, 0.5]),
    "loss-threshold": ("loss", False, 2, 0.05, [1.0, 0.97, 0.9, 0.88, 0.87, 0.86]),
    "acc-greater": ("accuracy", True, 2, 0.0, [0.5, 0.6, 0.6, 0.7, 0.65, 0.69, 0.71]),
    "acc-threshold": ("accuracy", True, 3, 0.02, [0.5, 0.51, 0.53, 0.54, 0.55, 0.56, 0.6]),
    "equal-values": ("loss", False, 3, 0.0, [1.0, 1.0, 1.0, 1.0]),
    "threshold-exact": ("loss", False, 2, 0.5, [1.0, 0.5, 0.25, 0.0, -1.0]),
}


def _run_early_stopping(module, args, patience, threshold, values) -> list[tuple]:
    callback = module.EarlyStoppingCallback(patience, threshold)
    state, control = module.TrainerState(), module.TrainerControl()
    callback.on_train_begin(args, state, control)
    key = args.metric_for_best_model
    key = key if key.startswith("eval_") else f"eval_{key}"
    better = (lambda a, b: a > b) if args.greater_is_better else (lambda a, b: a < b)
    record = []
    for value in values:
        callback.on_evaluate(args, state, control, metrics={key: value})
        record.append((callback.early_stopping_patience_counter, control.should_training_stop))
        if state.best_metric is None or better(value, state.best_metric):  # what the Trainer does on save
            state.best_metric = value
    return record


@pytest.mark.parametrize("args_kind", ["namespace", "ours"])
@pytest.mark.parametrize("case", sorted(_EARLY_CASES))
def test_early_stopping_matches_transformers(tmp_path, case, args_kind):
    """EarlyStoppingCallback counts and stops at the same evaluations as transformers'."""
    metric, greater, patience, threshold, values = _EARLY_CASES[case]
    kwargs = dict(
        eval_strategy="steps",
        eval_steps=1,
        save_steps=1,
        metric_for_best_model=metric,
        greater_is_better=greater,
        load_best_model_at_end=True,
    )
    their_args = _their_args(tmp_path, **kwargs)
    our_args = _our_args(args_kind, tmp_path, their_args, **kwargs)
    expected = _run_early_stopping(theirs, their_args, patience, threshold, values)
    assert _run_early_stopping(ours, our_args, patience, threshold, values) == expected


# --- Handler and printing ---


class _Recorder:
    def __init__(self):
        self.calls = []

    def __getattr__(self, event):
        def record(args, state, control, **kwargs):
            self.calls.append((event, sorted(kwargs)))

        return record


@pytest.mark.parametrize("event", list(ours.TRAINER_EVENTS))
def test_handler_event_kwargs_and_resets_match_transformers(event):
    """Each handler event passes the same keywords and clears the same control flags as transformers'."""
    results = []
    for module in (ours, theirs):
        recorder = _Recorder()
        handler = module.CallbackHandler([module.DefaultFlowCallback, recorder], "m", "tok", "opt", "sched")
        control = module.TrainerControl(True, True, True, True, True)
        extra = {"metrics": {}} if event in ("on_evaluate", "on_predict") else {}
        extra = {"logs": {}} if event == "on_log" else extra
        state = module.TrainerState(global_step=1, max_steps=10)
        control = getattr(handler, event)(types.SimpleNamespace(**_FLOW_DEFAULTS), state, control, **extra)
        results.append((recorder.calls, _flags(control)))
    assert results[0] == results[1]


_FLOW_DEFAULTS = dict(
    logging_strategy="no", logging_first_step=False, eval_strategy="no", eval_delay=0, save_strategy="no"
)


@pytest.mark.parametrize("callback_name", ["PrinterCallback", "ProgressCallback"])
def test_log_printing_matches_transformers(capsys, callback_name):
    """PrinterCallback and ProgressCallback print the same text for a log as transformers'."""
    logs = {"loss": 0.123456789, "step": 3, "total_flos": 1e9, "note": "x" * 150, "short": "ok"}
    printed = []
    for module in (ours, theirs):
        callback = getattr(module, callback_name)()
        state, control = module.TrainerState(max_steps=3), module.TrainerControl()
        callback.on_train_begin(None, state, control)
        callback.on_log(None, state, control, logs=dict(logs))
        callback.on_train_end(None, state, control)
        printed.append(capsys.readouterr().out)
    assert printed[0] == printed[1]
    assert "loss" in printed[0]


@pytest.mark.parametrize(
    "kwargs",
    [{"eval_strategy": "steps", "eval_steps": 1}, {"metric_for_best_model": "loss", "save_strategy": "no"}],
    ids=["no-metric", "no-evaluation"],
)
def test_early_stopping_without_metric_or_evaluation_raises_what_transformers_raises(kwargs, tmp_path):
    """transformers' callback asserts (AssertionError); ours raises an error that is that and a ValueError
    naming the argument, at the same moment (train begin, before any step)."""
    import hf_lightning
    from tests.tiny import RegressionModel, regression_data

    steps = {}
    for name, lib in (("theirs", transformers), ("ours", hf_lightning)):
        args = lib.TrainingArguments(str(tmp_path / name), max_steps=2, report_to="none", use_cpu=True,
                                     disable_tqdm=True, **kwargs)  # fmt: skip
        data = regression_data(8)
        trainer = lib.Trainer(RegressionModel(), args, train_dataset=data, eval_dataset=data,
                              callbacks=[lib.EarlyStoppingCallback(2)])  # fmt: skip
        with pytest.raises(AssertionError):
            trainer.train()
        steps[name] = trainer.state.global_step
    assert steps["ours"] == steps["theirs"] == 0


@pytest.mark.parametrize(
    "overrides",
    [dict(eval_strategy="steps"), dict(eval_strategy="no", metric_for_best_model="loss")],
    ids=["no-metric", "no-evaluation"],
)
def test_early_stopping_setup_errors_start_with_transformers_words(overrides, tmp_path):
    """Both raise AssertionError; ours begins with transformers' sentence and adds what to set."""
    import transformers

    import hf_lightning

    messages = []
    for lib in (transformers, hf_lightning):
        args = lib.TrainingArguments(str(tmp_path), report_to="none", use_cpu=True, **overrides)
        with pytest.raises(AssertionError) as raised:
            lib.EarlyStoppingCallback().on_train_begin(args, lib.TrainerState(), lib.TrainerControl())
        messages.append(str(raised.value))
    assert messages[1].startswith(messages[0])
