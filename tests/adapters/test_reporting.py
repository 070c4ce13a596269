"""report_to callbacks: created with the Trainer, named and keyed as transformers' integrations."""

from __future__ import annotations

import re
from typing import Any

import pytest

from hf_lightning import Trainer, TrainingArguments
from hf_lightning.adapters.callbacks.logging import LightningLoggersCallback, tracker_metrics
from hf_lightning.adapters.callbacks.reporting import TensorBoardReporter, reporting_callbacks
from hf_lightning.callbacks import TrainerControl, TrainerState
from tests.tiny import RegressionModel, regression_data


class _Recorder:
    """Stands in for a Lightning logger: records what it is given."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []
        self.experiment = type("Run", (), {"summary": {}})()

    def log_hyperparams(self, params):
        self.calls.append(("hyperparams", params))

    def log_metrics(self, metrics, step=None):
        self.calls.append(("metrics", (metrics, step)))

    def save(self):
        self.calls.append(("save", None))

    def finalize(self, status):
        self.calls.append(("finalize", status))


class WandbLogger(_Recorder):
    """A recorder named like Lightning's W&B logger."""


def _args(tmp_path, **kwargs) -> TrainingArguments:
    return TrainingArguments(output_dir=str(tmp_path), use_cpu=True, disable_tqdm=True, **kwargs)


def test_callbacks_follow_report_to_order(tmp_path):
    """One callback per tracker, in report_to's order; TensorBoard has its own reporter."""
    callbacks = reporting_callbacks(_args(tmp_path, report_to=["csv", "tensorboard"]), env={})
    assert [type(cb) for cb in callbacks] == [LightningLoggersCallback, TensorBoardReporter]


def test_report_to_none_adds_no_callback(tmp_path):
    """report_to='none' creates no reporting callback."""
    assert reporting_callbacks(_args(tmp_path, report_to="none"), env={}) == []


def test_trainer_holds_reporting_callbacks_from_construction(tmp_path):
    """The Trainer has its report_to callbacks right after DefaultFlowCallback, before any train()."""
    trainer = Trainer(model=RegressionModel(), args=_args(tmp_path, report_to="tensorboard"))
    names = [type(cb).__name__ for cb in trainer.callback_handler.callbacks]
    assert names[:2] == ["DefaultFlowCallback", "TensorBoardReporter"]


def test_csv_logs_a_standalone_evaluate(tmp_path):
    """With report_to='csv', evaluate() alone writes its metrics to output_dir/logs/.../metrics.csv."""
    trainer = Trainer(
        model=RegressionModel(),
        args=_args(tmp_path, report_to="csv"),
        eval_dataset=regression_data(8),
    )
    trainer.evaluate()
    (metrics,) = list((tmp_path / "logs").rglob("metrics.csv"))
    assert "eval_loss" in metrics.read_text().splitlines()[0]


def test_wandb_keys_are_prefixed_with_global_step():
    """W&B gets train/…, eval/… keys and train/global_step, with no step argument."""
    metrics, step = tracker_metrics("wandb", {"loss": 1.0, "eval_loss": 2.0, "epoch": 0.5}, 7)
    assert metrics == {"train/loss": 1.0, "eval/loss": 2.0, "train/epoch": 0.5, "train/global_step": 7}
    assert step is None


def test_wandb_run_totals_go_to_the_summary(tmp_path):
    """The end-of-training totals are W&B summary values, not logged series."""
    logger = WandbLogger()
    state = TrainerState(global_step=4)
    LightningLoggersCallback([logger]).on_log(
        _args(tmp_path), state, TrainerControl(), logs={"train_runtime": 1.5, "train_loss": 0.3}
    )
    assert logger.experiment.summary == {"train_runtime": 1.5, "train_loss": 0.3}
    assert logger.calls[0] == ("metrics", ({"train/global_step": 4}, None))


@pytest.mark.parametrize(
    "name,key,expected",
    [
        ("comet_ml", "eval_loss", "eval/loss"),
        ("mlflow", "eval_f1(macro)", "eval_f1_macro_"),
        ("csv", "loss", "loss"),
    ],
)
def test_tracker_key_names(name, key, expected):
    """Comet prefixes like TensorBoard; MLflow keeps keys with refused characters as _; CSV keeps keys."""
    metrics, step = tracker_metrics(name, {key: 1.0}, 3)
    assert metrics == {expected: 1.0} and step == 3


def test_tensorboard_trial_folder(tmp_path):
    """In a search trial TensorBoard writes under output_dir/runs/<date>_<host>/<trial name>."""
    reporter = TensorBoardReporter()
    state = TrainerState(is_hyper_param_search=True, trial_name="trial-3")
    reporter.on_train_begin(_args(tmp_path), state, TrainerControl())
    reporter.on_train_end(_args(tmp_path), state, TrainerControl())
    relative = reporter.logging_dir[len(str(tmp_path)) + 1 :]
    assert re.fullmatch(r"runs/[A-Z][a-z]{2}\d{2}_\d{2}-\d{2}-\d{2}_[^/]+/trial-3", relative)


def test_tensorboard_left_out_value_warns(tmp_path, caplog):
    """A log that is neither a number nor text is left out with a warning naming it."""
    reporter = TensorBoardReporter(str(tmp_path / "tb"))
    reporter.on_log(_args(tmp_path), TrainerState(), TrainerControl(), logs={"odd": [1, 2]})
    reporter.on_train_end(_args(tmp_path), TrainerState(), TrainerControl())
    assert "'train/odd'" in caplog.text


def test_reporting_callbacks_pickle_without_open_writers(tmp_path):
    """A reporter with an open writer or built loggers pickles (Ray trials copy the trainer)."""
    import pickle

    reporter = TensorBoardReporter(str(tmp_path / "tb"))
    reporter.on_log(_args(tmp_path), TrainerState(), TrainerControl(), logs={"loss": 1.0})
    csv_callback = reporting_callbacks(_args(tmp_path, report_to="csv"), env={})[0]
    csv_callback.on_log(_args(tmp_path), TrainerState(), TrainerControl(), logs={"loss": 1.0})
    copies = pickle.loads(pickle.dumps([reporter, csv_callback]))
    assert copies[0].tb_logger is None and copies[1]._built is None
    reporter.on_train_end(_args(tmp_path), TrainerState(), TrainerControl())


def test_wandb_trial_is_a_run_named_after_the_trial():
    """In a search trial the W&B spec is named after the trial and grouped by run_name; others unchanged."""
    from hf_lightning.adapters.callbacks.logging import trial_spec
    from hf_lightning.adapters.loggers import LoggerSpec

    wandb = LoggerSpec("wandb", (("name", "exp"), ("project", "huggingface")))
    assert dict(trial_spec(wandb, "trial-2", "exp").options) == {
        "name": "trial-2",
        "project": "huggingface",
        "group": "exp",
    }
    csv = LoggerSpec("csv", (("save_dir", "out"),))
    assert trial_spec(csv, "trial-2", "exp") is csv
