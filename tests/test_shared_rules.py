"""Rules both paths share: ``hf_lightning.Trainer`` and a plain ``lightning.Trainer`` running ``HFModule``
(and its callbacks) ask the same engine-free function, so they give the same answer."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from torch import nn

from hf_lightning import Trainer, TrainerState, TrainingArguments
from hf_lightning.adapters import HFCheckpoint, HFModule
from hf_lightning.adapters.callbacks.logging import tracker_name
from hf_lightning.adapters.loggers import LoggerSpec
from hf_lightning.loss import LossSettings
from hf_lightning.optim import current_learning_rate, get_scheduler

# --- the learning rate a step logs ------------------------------------------------------------------


def _optimizer_and_scheduler(kind: str) -> tuple[torch.optim.Optimizer, object]:
    """An SGD optimizer at 1.0 and a scheduler of ``kind``; the group's rate is then moved to 0.5."""
    optimizer = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=1.0)
    scheduler = {
        "none": lambda: None,
        "linear": lambda: get_scheduler("linear", optimizer, num_warmup_steps=2, num_training_steps=10),
        "plateau": lambda: get_scheduler("reduce_lr_on_plateau", optimizer),
        "no_last_lr": lambda: SimpleNamespace(step=lambda: None),
    }[kind]()
    optimizer.param_groups[0]["lr"] = 0.5  # apart from the linear schedule's last rate (0.0 at step 0)
    return optimizer, scheduler


RATES = [("none", 0.5), ("linear", 0.0), ("plateau", 0.5), ("no_last_lr", 0.5)]


@pytest.mark.parametrize(("kind", "expected"), RATES)
def test_current_learning_rate_is_the_schedules_else_the_first_groups(kind, expected) -> None:
    """The scheduler's last rate; the first group's with no scheduler, a metric-driven one or no last rate."""
    assert current_learning_rate(*_optimizer_and_scheduler(kind)) == expected


@pytest.mark.parametrize(("kind", "expected"), RATES)
def test_trainer_and_hf_module_log_the_same_learning_rate(tmp_path, kind, expected) -> None:
    """``Trainer._get_learning_rate`` and ``HFModule.current_learning_rate`` agree on the same pair."""
    model = nn.Linear(2, 2)
    optimizer, scheduler = _optimizer_and_scheduler(kind)
    args = TrainingArguments(str(tmp_path), use_cpu=True, report_to="none")
    trainer = Trainer(model, args, optimizers=(optimizer, scheduler))
    module = HFModule(model, args)
    module.optimizers = lambda: SimpleNamespace(optimizer=optimizer)  # as Lightning wraps it
    module.hf_lr_scheduler = scheduler
    assert trainer._get_learning_rate() == module.current_learning_rate() == expected


# --- the scheduler a run creates --------------------------------------------------------------------

SCHEDULES = [
    {"lr_scheduler_type": "linear", "warmup_steps": 0.25},
    {"lr_scheduler_type": "cosine", "warmup_steps": 2},
    {
        "lr_scheduler_type": "warmup_stable_decay",
        "warmup_steps": 0.2,
        "lr_scheduler_kwargs": {"num_decay_steps": 3},
    },
]


def _rates(scheduler: object, steps: int) -> list[float]:
    rates = []
    for _ in range(steps):
        rates.append(scheduler.get_last_lr()[0])
        scheduler.step()
    return rates


@pytest.mark.filterwarnings("ignore:Detected call of `lr_scheduler.step\\(\\)` before")
@pytest.mark.parametrize("schedule", SCHEDULES, ids=lambda s: s["lr_scheduler_type"])
def test_trainer_and_hf_module_create_the_same_schedule(tmp_path, schedule) -> None:
    """``Trainer.create_scheduler`` and ``HFModule.configure_optimizers`` give the same rates over a run."""
    steps = 10
    args = TrainingArguments(str(tmp_path), use_cpu=True, report_to="none", learning_rate=1.0, **schedule)
    trainer_optimizer = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=1.0)
    trainer = Trainer(nn.Linear(2, 2), args, optimizers=(trainer_optimizer, None))
    by_trainer = trainer.create_scheduler(steps, optimizer=trainer_optimizer)
    module = HFModule(
        nn.Linear(2, 2), args, optimizers=(torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=1.0), None)
    )
    module._trainer = SimpleNamespace(estimated_stepping_batches=steps)  # what Lightning tells the module
    module.configure_optimizers()
    rates = _rates(by_trainer, steps)
    assert rates == _rates(module.hf_lr_scheduler, steps)
    assert rates[0] == 0.0 and max(rates) == 1.0  # warmed up from 0 to the peak (a ratio resolved alike)


# --- the best metric --------------------------------------------------------------------------------

BESTS = [
    ("loss", None, [0.5, 0.7, 0.5, 0.3], [True, False, False, True]),
    ("accuracy", None, [0.5, 0.7, 0.7, 0.6], [True, True, False, False]),
    ("loss", True, [0.5, 0.7, 0.5, 0.9], [True, True, False, True]),
]


@pytest.mark.parametrize(("metric", "greater", "values", "expected"), BESTS)
def test_trainer_and_hf_checkpoint_pick_the_same_best(tmp_path, metric, greater, values, expected) -> None:
    """``Trainer._determine_best_metric`` and ``HFCheckpoint`` agree on each new best (direction, ties)."""
    args = TrainingArguments(
        str(tmp_path), use_cpu=True, report_to="none", metric_for_best_model=metric, greater_is_better=greater
    )
    trainer = Trainer(nn.Linear(2, 2), args)
    saver = HFCheckpoint(tmp_path, monitor=f"val_{metric}", greater_is_better=greater)
    by_trainer, by_callback = [], []
    for step, value in enumerate(values, start=1):
        trainer.state.global_step = step
        by_trainer.append(trainer._determine_best_metric({f"eval_{metric}": value}, trial=None))
        lightning = SimpleNamespace(callback_metrics={f"val_{metric}": torch.tensor(value)}, global_step=step)
        by_callback.append(saver._improved(lightning))
    assert by_trainer == by_callback == expected
    assert trainer.state.best_metric == pytest.approx(saver.best_metric)


# --- save_steps -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("save_steps", "valid"), [(500, True), (2.0, True), (1, True), (0.25, True), (1.5, False)]
)
def test_training_arguments_and_hf_checkpoint_accept_the_same_save_steps(tmp_path, save_steps, valid) -> None:
    """A ``save_steps`` both accept or both refuse: whole when above 1, below 1 a ratio of the run."""
    refused = []
    for build in (
        lambda: TrainingArguments(str(tmp_path), use_cpu=True, report_to="none", save_steps=save_steps),
        lambda: HFCheckpoint(tmp_path, save_steps=save_steps),
    ):
        try:
            build()
        except ValueError:
            refused.append(True)
        else:
            refused.append(False)
    assert refused == [not valid, not valid]


@pytest.mark.parametrize(("save_steps", "every"), [(0.25, 3), (0.5, 5), (4, 4)])
def test_trainer_state_and_hf_checkpoint_resolve_a_ratio_alike(tmp_path, save_steps, every) -> None:
    """A ratio ``save_steps`` becomes ceil(total steps x ratio) on both paths (10 steps here)."""
    state = TrainerState()
    state.compute_steps(
        TrainingArguments(str(tmp_path), report_to="none", save_steps=save_steps), max_steps=10
    )
    saver = HFCheckpoint(tmp_path, save_steps=save_steps)
    saver.setup(SimpleNamespace(estimated_stepping_batches=10), None, "fit")
    assert state.save_steps == saver._every == every


# --- tracker names ----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["tensorboard", "csv", "mlflow", "wandb", "comet_ml"])
def test_a_loggers_class_names_back_the_report_to_value_it_was_built_for(name) -> None:
    """``tracker_name`` reads the same table ``LoggerSpec`` builds from: class and ``report_to`` name agree."""
    logger_class = LoggerSpec(name, ()).logger_class
    assert tracker_name(type(logger_class, (), {})()) == name


# --- the items a step counts (num_items_in_batch) ---------------------------------------------------


def _counting_rows() -> list[dict[str, torch.Tensor]]:
    labels = torch.arange(24).reshape(2, 12) % 50
    labels[0, :5] = -100  # rows of 7 and 11 targets after the shift
    return [{"input_ids": labels.clamp(min=0), "labels": labels}]


@pytest.mark.parametrize("average", [True, False])
def test_a_steps_items_are_summed_over_processes_only_when_averaging(average) -> None:
    """``LossSettings.step_items``: the window's targets, through ``reduce_sum`` only when averaging tokens."""
    settings = LossSettings(
        accepts_loss_kwargs=True, shift_labels=True, average_tokens_across_devices=average
    )
    window = _counting_rows() * 2
    assert int(settings.step_items(nn.Linear(1, 1), window, None)) == 36
    assert int(settings.step_items(nn.Linear(1, 1), window, lambda count: count * 2)) == (
        72 if average else 36
    )


@pytest.mark.parametrize("average", [True, False])
def test_trainer_and_hf_module_count_the_same_items(tmp_path, average) -> None:
    """``Trainer.get_batch_samples`` and ``HFModule.count_items`` build one ``LossSettings`` and count alike."""
    from transformers import GPT2Config, GPT2LMHeadModel

    model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=50, n_positions=16))
    args = TrainingArguments(
        str(tmp_path), use_cpu=True, report_to="none", average_tokens_across_devices=average
    )
    trainer = Trainer(model, args)
    _, trainer_count = trainer.get_batch_samples(iter(_counting_rows() * 2), 2, torch.device("cpu"))
    module = HFModule(model, args)
    module._trainer = SimpleNamespace(world_size=1, strategy=None)  # one process, as a fit would attach
    assert trainer.compute_loss_func is None and module.loss_settings.compute_loss_func is None
    assert int(trainer_count) == int(module.count_items(_counting_rows() * 2)) == 36


# --- what "installed" means for a tracker -----------------------------------------------------------


@pytest.mark.parametrize(("present", "expected"), [({"tensorboardX"}, True), (set(), False)])
def test_report_to_all_and_the_loggers_agree_on_an_installed_tracker(monkeypatch, present, expected) -> None:
    """``report_to="all"`` (the arguments) and the Lightning logger builder (the engine) ask one table: with
    only tensorboardX importable, tensorboard counts as installed for both; with neither, for neither."""
    import importlib.util

    from hf_lightning.adapters import loggers
    from hf_lightning.args import trackers

    real = importlib.util.find_spec
    hidden = {"tensorboard", "tensorboardX"} - present
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name in hidden else real(name, *a)
    )
    assert ("tensorboard" in trackers.available_integrations()) is expected
    assert ("tensorboard" in loggers.normalize_report_to("all")) is expected
    if not expected:
        with pytest.raises(ImportError, match="pip install tensorboard"):
            loggers._require_installed("tensorboard")
