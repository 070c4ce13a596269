"""hyperparameter_search compared with transformers': BestRun, default spaces and objective, trial arguments.

Two documented differences are tested as such: the trial's seed reaches ``model_init`` (docs/divergences.md,
divergence 8) and ``n_trials`` counts the trials a stored study already holds.
"""

from __future__ import annotations

import optuna
import pytest
import torch

import hf_lightning
from hf_lightning.trainer.hpsearch import default_hp_space_optuna, default_hp_space_ray
from tests.tiny import RegressionModel, regression_data

transformers = pytest.importorskip("transformers")
optuna.logging.set_verbosity(optuna.logging.WARNING)

OursTrainer = hf_lightning.Trainer

BASE = dict(
    report_to="none",
    save_strategy="no",
    use_cpu=True,
    disable_tqdm=True,
    seed=42,
    per_device_train_batch_size=8,
    num_train_epochs=1,
    learning_rate=0.1,
)


def trainers(tmp_path, model_init=None, **overrides):
    """{'hf': transformers.Trainer, 'ours': hf_lightning Trainer} on the same model_init, data and arguments."""
    out = {}
    for name, lib, cls in (("hf", transformers, transformers.Trainer), ("ours", hf_lightning, OursTrainer)):
        args = lib.TrainingArguments(output_dir=str(tmp_path / name), **{**BASE, **overrides})
        out[name] = cls(
            model_init=model_init or (lambda: RegressionModel()),
            args=args,
            train_dataset=regression_data(32),
            eval_dataset=regression_data(16, seed=1),
        )
    return out


def fixed_space(trial):
    # no seed: transformers seeds before applying the trial (divergence 8), so a trial seed changes its data order
    return {
        "learning_rate": trial.suggest_categorical("learning_rate", [0.2]),
        "num_train_epochs": trial.suggest_categorical("num_train_epochs", [2]),
    }


def test_best_run_has_transformers_fields():
    """BestRun is the same named tuple: run_id, objective, hyperparameters, run_summary."""
    assert hf_lightning.BestRun._fields == transformers.trainer_utils.BestRun._fields


@pytest.mark.parametrize("eval_strategy", ["no", "epoch"])
def test_same_trial_gives_the_same_best_run(tmp_path, eval_strategy):
    """The same trial parameters give the same default objective, run_id and hyperparameters."""
    runs = {
        name: trainer.hyperparameter_search(hp_space=fixed_space, n_trials=1, backend="optuna")
        for name, trainer in trainers(tmp_path, eval_strategy=eval_strategy).items()
    }
    hf, ours = runs["hf"], runs["ours"]
    assert (
        (ours.run_id, ours.hyperparameters)
        == (hf.run_id, hf.hyperparameters)
        == ("0", {"learning_rate": 0.2, "num_train_epochs": 2})
    )
    torch.testing.assert_close(ours.objective, hf.objective, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize(
    "metrics",
    [
        {"eval_loss": 0.5, "epoch": 1.0, "eval_runtime": 0.1, "eval_samples_per_second": 10.0},
        {"eval_loss": 0.5, "eval_accuracy": 0.75, "eval_f1": 0.5, "eval_steps_per_second": 3.0, "epoch": 2.0},
        {"eval_accuracy": 0.9},
    ],
)
def test_default_objective_matches(metrics):
    """eval_loss alone, else the sum of the metrics without loss, epoch, runtime and speed keys."""
    ours = hf_lightning.trainer_utils.default_compute_objective(dict(metrics))
    assert ours == transformers.trainer_utils.default_compute_objective(dict(metrics))


def test_default_optuna_space_matches():
    """The default Optuna space suggests the same parameters from the same distributions."""
    spaces = {}
    for name, fn in (
        ("hf", transformers.trainer_utils.default_hp_space_optuna),
        ("ours", default_hp_space_optuna),
    ):
        trial = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0)).ask()
        spaces[name] = (fn(trial), trial.distributions)
    assert spaces["ours"] == spaces["hf"]


def _domain(value):
    return (
        type(value).__name__,
        getattr(value, "lower", None),
        getattr(value, "upper", None),
        getattr(value, "categories", None),
        type(getattr(value, "sampler", None)).__name__,
    )


def test_default_ray_space_matches():
    """The default Ray Tune space has the same keys and sampling domains."""
    theirs = transformers.trainer_utils.default_hp_space_ray(None)
    ours = default_hp_space_ray(None)
    assert {k: _domain(v) for k, v in ours.items()} == {k: _domain(v) for k, v in theirs.items()}


def test_trial_values_are_cast_like_transformers(tmp_path):
    """A trial's values reach the arguments with the same casts (float epochs -> int, str -> enum)."""
    params = {
        "num_train_epochs": 2.0,
        "learning_rate": 0.3,
        "seed": 7.0,
        "lr_scheduler_type": "cosine",
        "warmup_steps": 3,
    }
    seen = {}
    for name, trainer in trainers(tmp_path).items():
        trainer.hp_search_backend = "optuna"
        trainer.hp_space = lambda trial: dict(params)
        trainer.hp_name = None
        trainer._hp_search_setup(optuna.trial.FixedTrial(params))
        seen[name] = {
            key: (getattr(trainer.args, key), type(getattr(trainer.args, key)).__name__) for key in params
        }
    assert seen["ours"] == seen["hf"]


def _seed_draw(seed):
    hf_lightning.set_seed(seed)
    return float(torch.randn(()))


def test_divergence_8_trial_seed_reaches_model_init(tmp_path):
    """docs/divergences.md divergence 8: model_init sees the trial's seed here; transformers builds the model first."""
    draws = {"hf": [], "ours": []}

    def model_init_for(name):
        def model_init(trial):
            if trial is not None:
                draws[name].append(float(torch.randn(())))
            return RegressionModel()

        return model_init

    for name in draws:
        trainer = trainers(tmp_path, model_init=model_init_for(name))[name]
        trainer.hyperparameter_search(
            hp_space=lambda t: {"seed": t.suggest_categorical("seed", [7])}, n_trials=1, backend="optuna"
        )
    assert draws["ours"] == [_seed_draw(7)]
    assert draws["hf"] == [_seed_draw(42)]  # transformers: the arguments' seed, not the trial's


def test_stored_study_n_trials_counts_existing_trials(tmp_path):
    """A rerun on a stored study: ours tops it up to n_trials, transformers runs n_trials more."""
    totals = {}
    for name, trainer in trainers(tmp_path).items():
        search = dict(
            hp_space=fixed_space,
            backend="optuna",
            storage=f"sqlite:///{tmp_path / name}.db",
            study_name="s",
            load_if_exists=True,
        )
        trainer.hyperparameter_search(n_trials=1, **search)
        trainer.hyperparameter_search(n_trials=2, **search)
        totals[name] = len(optuna.load_study(study_name="s", storage=search["storage"]).trials)
    assert totals == {"hf": 3, "ours": 2}


def test_trials_that_save_nothing_leave_no_folders(tmp_path):
    """With ``save_strategy="no"`` transformers never makes a trial's ``run-N`` folder; nor do we (the output
    folder's lock made it and left it empty)."""
    listed = {}
    for name, trainer in trainers(tmp_path).items():
        trainer.hyperparameter_search(hp_space=fixed_space, n_trials=2, backend="optuna")
        listed[name] = (
            sorted(p.name for p in (tmp_path / name).iterdir()) if (tmp_path / name).exists() else None
        )
    assert listed["ours"] == listed["hf"]
