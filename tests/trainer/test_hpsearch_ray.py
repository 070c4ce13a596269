"""Trainer.hyperparameter_search on Ray Tune: a local instance, schedulers, pickling to workers.

Ray trials run in worker processes that import torch and Lightning first, so the searches are marked
slow (~20 s each on 2 cores); the argument checks run before Ray starts and are fast.
"""

from __future__ import annotations

import os
import shutil
import threading

import pytest
import ray
from ray import tune
from ray.tune.schedulers import ASHAScheduler, PopulationBasedTraining

from hf_lightning import Trainer, TrainerCallback, TrainingArguments
from hf_lightning.adapters.hpsearch import ray as ray_backend
from hf_lightning.trainer_utils import default_compute_objective
from tests.tiny import HP_SEARCH_ARGS, RegressionModel, regression_data


def model_init(trial):
    return RegressionModel()


def lr_space(trial):
    return {"learning_rate": tune.uniform(0.01, 0.5)}


def make_trainer(tmp_path, callbacks=None, train_dataset=None, **overrides):
    kwargs = {**HP_SEARCH_ARGS, "output_dir": str(tmp_path / "out"), **overrides}
    return Trainer(
        model_init=model_init,
        args=TrainingArguments(**kwargs),
        train_dataset=train_dataset if train_dataset is not None else regression_data(32),
        eval_dataset=regression_data(16, seed=1),
        callbacks=callbacks,
    )


@pytest.fixture(scope="module")
def local_ray():
    """A small local Ray instance for this module's searches."""
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


@pytest.fixture
def ray_starts(monkeypatch):
    """Records each time the search would start (or join) Ray."""
    calls = []
    monkeypatch.setattr(ray_backend, "_init_ray", calls.append)
    return calls


@pytest.mark.slow
def test_search_after_an_earlier_training(tmp_path, local_ray):
    """n_trials=2 with 1 CPU per trial returns a BestRun and the result grid, after train() ran (divergence 4)."""
    trainer = make_trainer(tmp_path)
    trainer.train()  # leaves an optimizer and scheduler behind: transformers then fails with "cannot pickle weakref"
    best = trainer.hyperparameter_search(
        hp_space=lr_space,
        n_trials=2,
        backend="ray",
        resources_per_trial={"cpu": 1},
        storage_path=str(tmp_path / "ray"),
        verbose=0,
    )
    frame = best.run_summary.get_dataframe()
    assert isinstance(best.run_summary, tune.ResultGrid) and len(frame) == 2
    assert best.objective == frame["objective"].min() == frame["eval_loss"].min()
    assert best.run_id in set(frame["trial_id"]) and 0.01 <= best.hyperparameters["learning_rate"] <= 0.5
    assert (
        best.run_summary.get_best_trial("objective", "min").trial_id == best.run_id
    )  # ExperimentAnalysis API


@pytest.mark.slow
def test_asha_with_evaluation_reports_each_evaluation_and_checkpoint(tmp_path, local_ray, monkeypatch):
    """Each evaluation reports metrics, objective and the checkpoint saved with it; checkpoints go to run-{id}."""
    monkeypatch.chdir(tmp_path)  # a relative output_dir still lands here, not in Ray's trial folder
    trainer = make_trainer(tmp_path, num_train_epochs=2, save_strategy="epoch", output_dir="out")
    best = trainer.hyperparameter_search(
        hp_space=lr_space,
        n_trials=2,
        backend="ray",
        resources_per_trial={"cpu": 1},
        verbose=0,
        scheduler=ASHAScheduler(metric="objective", mode="min", grace_period=2, max_t=2),
        progress_reporter=tune.CLIReporter(metric_columns=["objective"]),
        storage_path=str(tmp_path / "ray"),
    )
    for result in best.run_summary:
        history = result.metrics_dataframe
        assert list(history["epoch"]) == [1.0, 2.0]
        assert list(history["objective"]) == list(history["eval_loss"])
        with result.checkpoint.as_directory() as folder:
            assert os.listdir(folder) == ["checkpoint-8"]
        run_dir = tmp_path / "out" / f"run-{result.metrics['trial_id']}"
        # checkpoint-8 may be missing: ASHA stops a trial at max_t once its report arrives, before the save
        assert "checkpoint-4" in os.listdir(run_dir)
    assert best.objective == min(result.metrics["objective"] for result in best.run_summary)


@pytest.mark.parametrize(
    "scheduler",
    [
        ASHAScheduler(metric="objective", mode="min"),
        PopulationBasedTraining(
            metric="objective", mode="min", hyperparam_mutations={"learning_rate": [0.1, 0.2]}
        ),
        "asha",
    ],
)
def test_scheduler_without_evaluation_raises(tmp_path, scheduler, ray_starts):
    """ASHA and PBT need evaluation during training; without it the search stops with a clear error."""
    trainer = make_trainer(tmp_path, eval_strategy="no")
    with pytest.raises(ValueError, match=r"scheduler=.*eval_strategy='no'.*'steps' or 'epoch'"):
        trainer.hyperparameter_search(hp_space=lr_space, n_trials=2, backend="ray", scheduler=scheduler)
    assert ray_starts == []


class LockedDataset(list):
    """A dataset holding a lock, which cannot be pickled."""

    def __init__(self, items):
        super().__init__(items)
        self.lock = threading.Lock()


class LockedCallback(TrainerCallback):
    def __init__(self):
        self.lock = threading.Lock()


@pytest.mark.parametrize(
    "make, named",
    [
        (lambda p: make_trainer(p, train_dataset=LockedDataset(regression_data(8))), "Trainer.train_dataset"),
        (lambda p: make_trainer(p, callbacks=[LockedCallback()]), "callback LockedCallback"),
    ],
)
def test_unpicklable_parts_are_named(tmp_path, make, named, ray_starts):
    """What cannot be pickled to the workers is named in the error, before Ray starts."""
    with pytest.raises(TypeError, match=f"cannot be pickled:\n  {named} .*lock"):
        make(tmp_path).hyperparameter_search(hp_space=lr_space, n_trials=1, backend="ray")
    assert ray_starts == []


def test_address_with_ray_already_running_raises(tmp_path, monkeypatch):
    """address= joins a cluster only when this process has not started Ray already."""
    monkeypatch.setattr(ray, "is_initialized", lambda: True)
    with pytest.raises(ValueError, match="address='ray://head:10001'.*already runs Ray"):
        make_trainer(tmp_path).hyperparameter_search(
            hp_space=lr_space, n_trials=1, backend="ray", address="ray://head:10001"
        )


def test_address_starts_or_joins_ray(tmp_path, monkeypatch):
    """Without a running Ray, the search calls ray.init with the given address (None: a local instance)."""
    calls = []
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", lambda address=None: calls.append(address))
    monkeypatch.setattr(
        tune, "with_parameters", lambda *a, **k: (_ for _ in ()).throw(RuntimeError("stop here"))
    )
    for address in (None, "ray://head:10001"):
        with pytest.raises(RuntimeError, match="stop here"):
            make_trainer(tmp_path).hyperparameter_search(
                hp_space=lr_space, n_trials=1, backend="ray", address=address
            )
    assert calls == [None, "ray://head:10001"]


@pytest.mark.parametrize("n_gpu, expected", [(0, {"cpu": 1}), (2, {"cpu": 1, "gpu": 1})])
def test_default_resources_per_trial(n_gpu, expected):
    """One CPU per trial, plus one GPU when the machine has any."""

    assert ray_backend.default_resources(n_gpu) == expected


def test_worker_copy_holds_no_run_state(tmp_path, monkeypatch):
    """The copy sent to workers has no model, optimizer or scheduler, and absolute output paths."""
    monkeypatch.chdir(tmp_path)
    trainer = make_trainer(tmp_path, output_dir="relative_out")
    trainer.train()
    copy = ray_backend._worker_copy(trainer)
    assert copy.model is None and copy.optimizer is None and copy.lr_scheduler is None
    assert copy.args.output_dir.startswith("/") and copy.args.output_dir.endswith("relative_out")
    assert trainer.optimizer is not None and trainer.args.output_dir == "relative_out"


def test_restarted_trial_resumes_from_its_tune_checkpoint(tmp_path, monkeypatch):
    """A trial Ray restarts with a checkpoint (PBT exploit, failure) resumes training from it."""
    first = make_trainer(
        tmp_path, num_train_epochs=2, save_strategy="epoch", output_dir=str(tmp_path / "first")
    )
    first.train()
    shutil.rmtree(tmp_path / "first" / "checkpoint-8")  # Tune's checkpoint folder holds the one it reported
    reports = []
    monkeypatch.setattr(
        tune, "get_checkpoint", lambda: tune.Checkpoint.from_directory(str(tmp_path / "first"))
    )
    monkeypatch.setattr(
        tune, "report", lambda metrics, checkpoint=None: reports.append((metrics, checkpoint))
    )
    monkeypatch.setattr(ray_backend, "trial_id", lambda trial: "t0")
    trainer = make_trainer(tmp_path, num_train_epochs=2, eval_strategy="no")
    trainer.hp_search_backend, trainer.hp_space, trainer.compute_objective = (
        "ray",
        lr_space,
        default_compute_objective,
    )
    worker_trainer = ray_backend._worker_copy(trainer)
    ray_backend._trainable({"learning_rate": 0.1}, trainer=worker_trainer)
    assert worker_trainer.state.global_step == 8
    assert [h["step"] for h in worker_trainer.state.log_history if "train_loss" in h] == [8]
    assert not any(
        h["step"] <= 4 for h in worker_trainer.state.log_history if "loss" in h
    )  # steps 1-4 skipped
    ((metrics, checkpoint),) = reports
    assert metrics["done"] and metrics["objective"] == metrics["eval_loss"] and checkpoint is not None
