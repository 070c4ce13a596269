"""TrainerState, TrainerControl, TrainerCallback, CallbackHandler and the built-in callbacks."""

from __future__ import annotations

import dataclasses
import logging
import types

import pytest

from hf_lightning.callbacks import (
    TRAINER_EVENTS,
    CallbackHandler,
    DefaultFlowCallback,
    EarlyStoppingCallback,
    ExportableState,
    PrinterCallback,
    ProgressCallback,
    TrainerCallback,
    TrainerControl,
    TrainerState,
)

_EVENT_EXTRAS = {"on_evaluate": {"metrics": {}}, "on_predict": {"metrics": {}}, "on_log": {"logs": {}}}


def _args(**overrides):
    values = dict(
        logging_strategy="steps",
        logging_steps=500,
        logging_first_step=False,
        eval_strategy="no",
        eval_steps=None,
        eval_delay=0,
        save_strategy="no",
        save_steps=500,
        load_best_model_at_end=True,
        metric_for_best_model="loss",
        greater_is_better=False,
    )
    return types.SimpleNamespace(**{**values, **overrides})


class _Recorder(TrainerCallback):
    """Records (name, event, kwargs) into a shared log; may return a replacement control."""

    def __init__(self, name="rec", log=None, replacement=None):
        self.name, self.log, self.replacement = name, log if log is not None else [], replacement

    def on_step_end(self, args, state, control, **kwargs):
        self.log.append((self.name, "on_step_end", kwargs, control))
        return self.replacement

    def on_log(self, args, state, control, **kwargs):
        self.log.append((self.name, "on_log", kwargs, control))


class _Other(TrainerCallback):
    pass


def _handler(callbacks):
    return CallbackHandler(callbacks, "model", "tokenizer", "optimizer", "scheduler")


# --- TrainerState ---


def test_state_round_trips_through_json(tmp_path):
    """save_to_json then load_from_json gives back an equal state."""
    state = TrainerState(epoch=1.5, global_step=12, log_history=[{"loss": 0.5, "step": 12}], best_metric=0.1)
    state.save_to_json(tmp_path / "s.json")
    assert TrainerState.load_from_json(tmp_path / "s.json") == state


def test_state_load_ignores_unknown_keys(tmp_path, caplog):
    """Keys a newer writer added are dropped with a warning naming them."""
    path = tmp_path / "s.json"
    path.write_text('{"global_step": 3, "future_field": 1}')
    with caplog.at_level(logging.WARNING):
        state = TrainerState.load_from_json(path)
    assert state.global_step == 3
    assert "future_field" in caplog.text


def test_state_exports_stateful_callbacks():
    """A list of ExportableState callbacks becomes a class-name -> state mapping, duplicates as a list."""
    state = TrainerState(
        stateful_callbacks=[EarlyStoppingCallback(2), EarlyStoppingCallback(3), TrainerControl()]
    )
    assert [
        s["args"]["early_stopping_patience"] for s in state.stateful_callbacks["EarlyStoppingCallback"]
    ] == [2, 3]
    assert state.stateful_callbacks["TrainerControl"]["args"]["should_log"] is False


def test_state_rejects_non_exportable_callbacks():
    """A callback without ExportableState in stateful_callbacks raises TypeError naming it."""
    with pytest.raises(TypeError, match="_Other"):
        TrainerState(stateful_callbacks=[_Other()])


@pytest.mark.parametrize(
    "steps, max_steps, expected",
    [
        ((10, 20, 30), 100, (10, 20, 30)),
        ((0.1, 0.25, 0.5), 100, (10, 25, 50)),
        ((0.1, 0.25, 0.5), 17, (2, 5, 9)),
        ((0.1, None, 7), 5, (1, 500, 7)),
    ],
)
def test_compute_steps(steps, max_steps, expected):
    """Ratios < 1 become ceil(ratio * max_steps); None keeps the state's value."""
    state = TrainerState()
    logging_steps, eval_steps, save_steps = steps
    args = types.SimpleNamespace(logging_steps=logging_steps, eval_steps=eval_steps, save_steps=save_steps)
    state.compute_steps(args, max_steps)
    assert (state.logging_steps, state.eval_steps, state.save_steps) == expected


@pytest.mark.parametrize(
    "trial, params",
    [(None, None), ({"lr": 0.1}, {"lr": 0.1}), (types.SimpleNamespace(params={"lr": 2}), {"lr": 2})],
)
def test_init_training_references(trial, params):
    """Totals, ranks, trial name and trial parameters are read from a trainer-like object."""
    trainer = types.SimpleNamespace(
        hp_name=lambda t: "run-7",
        _trial=trial,
        is_local_process_zero=lambda: True,
        is_world_process_zero=lambda: False,
    )
    state = TrainerState()
    state.init_training_references(trainer, max_steps=40, num_train_epochs=2, trial=trial)
    assert (state.max_steps, state.num_train_epochs, state.trial_params) == (40, 2, params)
    assert (state.is_local_process_zero, state.is_world_process_zero) == (True, False)
    assert state.trial_name == (None if trial is None else "run-7")


def test_init_training_references_rejects_unknown_trial():
    """A trial that is neither a dict nor has .params raises TypeError naming `trial`."""
    trainer = types.SimpleNamespace(is_local_process_zero=lambda: True, is_world_process_zero=lambda: True)
    with pytest.raises(TypeError, match="`trial`"):
        TrainerState().init_training_references(trainer, 1, 1, trial=42)


# --- TrainerControl and ExportableState ---


@pytest.mark.parametrize(
    "reset, cleared",
    [
        ("_new_training", {"should_training_stop"}),
        ("_new_epoch", {"should_epoch_stop"}),
        ("_new_step", {"should_save", "should_evaluate", "should_log"}),
    ],
)
def test_control_resets(reset, cleared):
    """Each reset clears exactly its flags."""
    control = TrainerControl(True, True, True, True, True)
    getattr(control, reset)()
    assert {name for name, value in dataclasses.asdict(control).items() if not value} == cleared


def test_control_round_trips_through_state():
    """TrainerControl.from_state(control.state()) restores every flag."""
    control = TrainerControl(should_save=True, should_log=True)
    assert TrainerControl.from_state(control.state()) == control


def test_exportable_state_requires_state():
    """ExportableState.state raises NotImplementedError until a subclass implements it."""
    with pytest.raises(NotImplementedError):
        ExportableState().state()


# --- TrainerCallback ---


def test_every_event_is_a_callback_method_and_a_handler_method():
    """TRAINER_EVENTS lists exactly the on_* methods of TrainerCallback, and the handler has each."""
    assert {n for n in vars(TrainerCallback) if n.startswith("on_")} == set(TRAINER_EVENTS)
    assert all(name in vars(CallbackHandler) for name in TRAINER_EVENTS)


@pytest.mark.parametrize("event", TRAINER_EVENTS)
def test_base_callback_events_return_none(event):
    """The base class accepts every event with (args, state, control, **kwargs) and changes nothing."""
    control = TrainerControl()
    kwargs = _EVENT_EXTRAS.get(event, {})
    assert getattr(TrainerCallback(), event)(None, TrainerState(), control, **kwargs) is None
    assert control == TrainerControl()


# --- CallbackHandler ---


def test_handler_calls_callbacks_in_order_with_trainer_objects():
    """Callbacks are called in list order with model, processing_class, optimizer, scheduler and loaders."""
    log = []
    handler = _handler([DefaultFlowCallback, _Recorder("a", log), _Recorder("b", log)])
    handler.train_dataloader, handler.eval_dataloader = "train_dl", "eval_dl"
    handler.on_log(_args(), TrainerState(), TrainerControl(), logs={"loss": 1.0})
    assert [entry[0] for entry in log] == ["a", "b"]
    assert log[0][2] == {
        "model": "model",
        "processing_class": "tokenizer",
        "optimizer": "optimizer",
        "lr_scheduler": "scheduler",
        "train_dataloader": "train_dl",
        "eval_dataloader": "eval_dl",
        "logs": {"loss": 1.0},
    }


def test_returned_control_replaces_the_current_one():
    """A callback returning a TrainerControl hands it to the next callbacks and to the caller."""
    log, replacement = [], TrainerControl(should_training_stop=True)
    handler = _handler([DefaultFlowCallback, _Recorder("a", log, replacement), _Recorder("b", log)])
    state = TrainerState(global_step=1, max_steps=100)
    result = handler.on_step_end(_args(), state, TrainerControl())
    assert result is replacement
    assert log[1][3] is replacement


@pytest.mark.parametrize(
    "event, cleared",
    [
        ("on_train_begin", {"should_training_stop"}),
        ("on_epoch_begin", {"should_epoch_stop"}),
        ("on_step_begin", {"should_log", "should_evaluate", "should_save"}),
        ("on_evaluate", {"should_evaluate"}),
        ("on_save", {"should_save"}),
        ("on_log", {"should_log"}),
        ("on_step_end", set()),
    ],
)
def test_handler_clears_the_flag_an_event_owns(event, cleared):
    """Events clear the control flags they own before the callbacks run."""
    handler = _handler([DefaultFlowCallback])
    state = TrainerState(global_step=1, max_steps=100)
    control = getattr(handler, event)(
        _args(), state, TrainerControl(True, True, True, True, True), **_EVENT_EXTRAS.get(event, {})
    )
    assert {name for name, value in dataclasses.asdict(control).items() if not value} == cleared


def test_handler_warns_without_default_flow(caplog):
    """A handler without DefaultFlowCallback warns that logging/eval/save will not be scheduled."""
    with caplog.at_level(logging.WARNING):
        _handler([_Other])
    assert "DefaultFlowCallback" in caplog.text


def test_add_callback_accepts_class_or_instance_and_warns_on_duplicates(caplog):
    """add_callback instantiates a class, appends an instance, and warns on a second of one class."""
    handler = _handler([DefaultFlowCallback])
    instance = _Other()
    handler.add_callback(_Other)
    with caplog.at_level(logging.WARNING):
        handler.add_callback(instance)
    assert "already one" in caplog.text
    assert isinstance(handler.callbacks[1], _Other) and handler.callbacks[2] is instance
    assert handler.callback_list == "DefaultFlowCallback\n_Other\n_Other"


def test_pop_callback_by_class_or_instance():
    """pop_callback removes and returns the first of a class, or the given instance; None if absent."""
    first, second = _Other(), _Other()
    handler = _handler([DefaultFlowCallback, first, second])
    assert handler.pop_callback(_Other) is first
    assert handler.pop_callback(second) is second
    assert handler.pop_callback(_Other) is None
    assert handler.callback_list == "DefaultFlowCallback"


def test_remove_callback_by_class_or_instance():
    """remove_callback drops the first of a class or the instance; a missing instance is a ValueError."""
    first, second = _Other(), _Other()
    handler = _handler([DefaultFlowCallback, first, second])
    handler.remove_callback(_Other)
    assert handler.callbacks == [handler.callbacks[0], second]
    handler.remove_callback(second)
    handler.remove_callback(_Other)  # none left: no error
    with pytest.raises(ValueError, match="remove_callback"):
        handler.remove_callback(second)


# --- Built-in callbacks ---


def test_default_flow_stops_at_max_steps_with_final_save():
    """At max_steps training stops, with a final evaluation and save for step strategies."""
    args = _args(eval_strategy="steps", save_strategy="steps")
    state = TrainerState(global_step=7, max_steps=7, eval_steps=5, save_steps=5, logging_steps=5)
    control = DefaultFlowCallback().on_step_end(args, state, TrainerControl())
    assert (control.should_training_stop, control.should_evaluate, control.should_save) == (True, True, True)


def test_progress_callback_tracks_training_steps():
    """The training bar advances to global_step and is closed at train end."""
    callback, state, control = ProgressCallback(), TrainerState(max_steps=10), TrainerControl()
    callback.on_train_begin(None, state, control)
    state.global_step = 4
    callback.on_step_end(None, state, control)
    assert callback.training_bar.n == 4
    callback.on_train_end(None, state, control)
    assert callback.training_bar is None


@pytest.mark.parametrize("loader, has_bar", [([1, 2, 3], True), (iter([1, 2, 3]), False)])
def test_progress_callback_prediction_bar(loader, has_bar):
    """A prediction bar counts batches of a sized loader and is closed by on_evaluate."""
    callback, state, control = ProgressCallback(), TrainerState(), TrainerControl()
    callback.on_prediction_step(None, state, control, eval_dataloader=loader)
    callback.on_prediction_step(None, state, control, eval_dataloader=loader)
    assert (callback.prediction_bar is not None) == has_bar
    if has_bar:
        assert (callback.prediction_bar.n, callback.prediction_bar.total) == (2, 3)
    callback.on_evaluate(None, state, control, metrics={})
    assert callback.prediction_bar is None


def test_progress_callback_truncates_long_strings(capsys):
    """Logs are written with floats at 4 digits, long strings replaced, total_flos hidden."""
    callback, state, control = ProgressCallback(max_str_len=5), TrainerState(max_steps=2), TrainerControl()
    callback.on_train_begin(None, state, control)
    callback.on_log(None, state, control, logs={"loss": 0.123456, "text": "abcdefgh", "total_flos": 3.0})
    out = capsys.readouterr().out
    assert "'loss': '0.1235'" in out and "length: 8 > 5" in out and "total_flos" not in out


def test_progress_callback_draws_nothing_off_main_process():
    """Processes other than the world's main one create no bar."""
    callback = ProgressCallback()
    state = TrainerState(max_steps=3, is_world_process_zero=False)
    callback.on_train_begin(None, state, TrainerControl())
    callback.on_step_end(None, state, TrainerControl())
    assert callback.training_bar is None


def test_printer_callback_prints_and_drops_total_flos(capsys):
    """PrinterCallback prints formatted logs and removes total_flos from the dict it receives."""
    logs = {"loss": 0.5, "total_flos": 1.0}
    PrinterCallback().on_log(None, TrainerState(), TrainerControl(), logs=logs)
    assert capsys.readouterr().out.strip() == "{'loss': '0.5'}"
    assert logs == {"loss": 0.5}


@pytest.mark.parametrize(
    "overrides, match",
    [
        ({"metric_for_best_model": None, "eval_strategy": "steps"}, "metric_for_best_model"),
        ({"eval_strategy": "no"}, "eval_strategy='no'"),
    ],
)
def test_early_stopping_requires_metric_and_evaluation(overrides, match):
    """on_train_begin raises ValueError naming the missing argument."""
    args = _args(**overrides)
    with pytest.raises(ValueError, match=match):
        EarlyStoppingCallback().on_train_begin(args, TrainerState(), TrainerControl())


def test_early_stopping_warns_without_load_best_model(caplog):
    """Without load_best_model_at_end a warning says the best model will not be loaded."""
    with caplog.at_level(logging.WARNING):
        EarlyStoppingCallback().on_train_begin(
            _args(eval_strategy="steps", load_best_model_at_end=False), TrainerState(), TrainerControl()
        )
    assert "load_best_model_at_end" in caplog.text


def test_early_stopping_ignores_missing_metric(caplog):
    """An evaluation without the watched metric warns and does not count."""
    callback, control = EarlyStoppingCallback(), TrainerControl()
    with caplog.at_level(logging.WARNING):
        callback.on_evaluate(_args(), TrainerState(best_metric=0.1), control, metrics={"eval_acc": 1.0})
    assert callback.early_stopping_patience_counter == 0 and not control.should_training_stop
    assert "eval_loss" in caplog.text


def test_early_stopping_stops_after_patience():
    """Patience evaluations without improvement set should_training_stop."""
    callback, control, state = (
        EarlyStoppingCallback(early_stopping_patience=2),
        TrainerControl(),
        TrainerState(),
    )
    state.best_metric = 0.5
    for value in (0.6, 0.7):
        callback.on_evaluate(_args(), state, control, metrics={"eval_loss": value})
    assert control.should_training_stop


def test_early_stopping_threshold_none_means_zero():
    """early_stopping_threshold=None is treated as 0 (any improvement counts)."""
    callback = EarlyStoppingCallback(early_stopping_threshold=None)
    callback.early_stopping_patience_counter = 3
    callback.check_metric_value(_args(), TrainerState(best_metric=1.0), TrainerControl(), 0.99)
    assert callback.early_stopping_patience_counter == 0


def test_early_stopping_state_round_trip():
    """from_state(state()) restores patience, threshold and the counter."""
    callback = EarlyStoppingCallback(4, 0.25)
    callback.early_stopping_patience_counter = 2
    restored = EarlyStoppingCallback.from_state(callback.state())
    assert vars(restored) == vars(callback)
