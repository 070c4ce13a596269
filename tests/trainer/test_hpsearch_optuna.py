"""Trainer.hyperparameter_search on Optuna, and the engine-free front door (backend choice, errors, arguments)."""

from __future__ import annotations

import importlib.util
import json
import logging

import optuna
import pytest
import torch

import hf_lightning.trainer.hpsearch as hpsearch
from hf_lightning import Trainer, TrainerCallback, TrainingArguments
from tests.tiny import HP_SEARCH_ARGS, RegressionModel, regression_data

optuna.logging.set_verbosity(optuna.logging.WARNING)


def lr_space(trial):
    return {"learning_rate": trial.suggest_float("learning_rate", 0.01, 0.5)}


class Evaluations(TrainerCallback):
    """Records each trial's evaluations: [(trial_params, metrics), ...]."""

    def __init__(self):
        self.seen = []

    def on_evaluate(self, args, state, control, metrics=None, **kwargs):
        self.seen.append((dict(state.trial_params or {}), dict(metrics)))


def make_trainer(tmp_path, model_init=None, callbacks=None, **overrides):
    kwargs = {**HP_SEARCH_ARGS, "output_dir": str(tmp_path / "out"), **overrides}
    return Trainer(
        model_init=model_init or (lambda: RegressionModel()),
        args=TrainingArguments(**kwargs),
        train_dataset=regression_data(32),
        eval_dataset=regression_data(16, seed=1),
        callbacks=callbacks,
    )


def final_losses(recorder):
    """eval_loss of the last evaluation of each trial, keyed by its learning rate."""
    return {params["learning_rate"]: metrics["eval_loss"] for params, metrics in recorder.seen}


def test_best_run_is_the_best_trial_within_the_space(tmp_path):
    """n_trials=3 returns the trial with the lowest final eval_loss; its hyperparameters lie in hp_space."""
    recorder = Evaluations()
    trainer = make_trainer(tmp_path, callbacks=[recorder])
    best = trainer.hyperparameter_search(hp_space=lr_space, n_trials=3, backend="optuna")
    losses = final_losses(recorder)
    assert len(losses) == 3 and set(best.hyperparameters) == {"learning_rate"}
    assert 0.01 <= best.hyperparameters["learning_rate"] <= 0.5
    assert best.objective == min(losses.values()) == losses[best.hyperparameters["learning_rate"]]
    assert best.run_id == str(best.run_summary.best_trial.number)


def test_direction_maximize_returns_the_highest_objective(tmp_path):
    """direction='maximize' picks the trial with the largest objective."""
    trainer = make_trainer(tmp_path)
    best = trainer.hyperparameter_search(
        hp_space=lr_space,
        compute_objective=lambda m: -m["eval_loss"],
        n_trials=3,
        direction="maximize",
        backend="optuna",
    )
    values = [t.value for t in best.run_summary.trials]
    assert best.objective == max(values)


def test_multi_objective_returns_a_list_of_best_runs(tmp_path):
    """A list of directions makes a multi-objective study; the Pareto front comes back as BestRun objects."""
    trainer = make_trainer(tmp_path)
    runs = trainer.hyperparameter_search(
        hp_space=lr_space,
        compute_objective=lambda m: [m["eval_loss"], m["epoch"]],
        n_trials=3,
        direction=["minimize", "maximize"],
        backend="optuna",
    )
    assert isinstance(runs, list) and runs
    for run in runs:
        assert len(run.objective) == 2 and set(run.hyperparameters) == {"learning_rate"}


def test_objective_without_evaluation_during_training_is_a_final_evaluate(tmp_path):
    """eval_strategy='no': the trial's objective comes from one evaluate() after training."""
    recorder = Evaluations()
    trainer = make_trainer(tmp_path, callbacks=[recorder], eval_strategy="no")
    best = trainer.hyperparameter_search(hp_space=lr_space, n_trials=2, backend="optuna")
    assert len(recorder.seen) == 2
    assert best.objective == min(final_losses(recorder).values())


def test_median_pruner_prunes_a_trial_reporting_a_bad_objective(tmp_path):
    """The objective reported after each evaluation reaches the pruner, which stops a bad third trial."""
    trainer = make_trainer(tmp_path, num_train_epochs=3)
    bad = {"trial": 2}

    def objective(metrics):  # trials 0 and 1 report 1.0, trial 2 reports 100.0 from its first evaluation on
        return 100.0 if trainer._trial.number == bad["trial"] else 1.0

    best = trainer.hyperparameter_search(
        hp_space=lr_space,
        compute_objective=objective,
        n_trials=3,
        backend="optuna",
        pruner=optuna.pruners.MedianPruner(n_startup_trials=2, n_warmup_steps=0),
    )
    states = [t.state for t in best.run_summary.trials]
    assert states == [optuna.trial.TrialState.COMPLETE] * 2 + [optuna.trial.TrialState.PRUNED]
    assert list(best.run_summary.trials[2].intermediate_values.values()) == [100.0]  # stopped after epoch 1
    assert not trainer.is_in_train


def test_sqlite_study_continues_after_an_interruption(tmp_path):
    """A SQLite study interrupted after 2 trials continues to 4 on restart, not to 2 + 4."""
    storage = f"sqlite:///{tmp_path / 'hp.db'}"
    calls = {"n": 0}

    def model_init(trial):
        calls["n"] += trial is not None  # the Trainer constructor calls it without a trial
        if calls["n"] == 3 and trial is not None:
            raise KeyboardInterrupt("interrupted during trial 3")
        return RegressionModel()

    search = dict(
        hp_space=lr_space,
        n_trials=4,
        backend="optuna",
        storage=storage,
        study_name="resume",
        load_if_exists=True,
    )
    with pytest.raises(KeyboardInterrupt):
        make_trainer(tmp_path, model_init=model_init).hyperparameter_search(**search)
    best = make_trainer(tmp_path, model_init=model_init).hyperparameter_search(**search)
    complete = best.run_summary.get_trials(states=(optuna.trial.TrialState.COMPLETE,))
    assert len(complete) == 4 and calls["n"] == 5


@pytest.mark.parametrize("n_trials, expected_new", [(2, 0), (3, 1)])
def test_n_trials_counts_the_trials_a_stored_study_already_holds(tmp_path, n_trials, expected_new):
    """n_trials is the study's total of finished trials: a rerun adds only the missing ones."""
    storage = f"sqlite:///{tmp_path / 'hp.db'}"
    search = dict(hp_space=lr_space, backend="optuna", storage=storage, study_name="s", load_if_exists=True)
    make_trainer(tmp_path).hyperparameter_search(n_trials=2, **search)
    best = make_trainer(tmp_path).hyperparameter_search(n_trials=n_trials, **search)
    assert len(best.run_summary.trials) == 2 + expected_new


def test_trial_seed_reaches_model_init(tmp_path):
    """model_init runs after the trial's seed is set: equal seeds build equal weights, other seeds others."""
    storage = optuna.storages.InMemoryStorage()
    study = optuna.create_study(storage=storage, study_name="seeds")
    for seed in (7, 8, 7):
        study.enqueue_trial({"seed": seed})
    built = []

    def model_init(trial):
        model = RegressionModel(a=float(torch.randn(())), b=float(torch.randn(())))
        if trial is not None:
            built.append((trial.params["seed"], model.a.item(), model.b.item()))
        return model

    trainer = make_trainer(tmp_path, model_init=model_init, seed=123)
    trainer.hyperparameter_search(
        hp_space=lambda t: {"seed": t.suggest_int("seed", 1, 40)},
        n_trials=3,
        backend="optuna",
        storage=storage,
        study_name="seeds",
        load_if_exists=True,
    )
    (s0, *w0), (s1, *w1), (s2, *w2) = built
    assert (s0, s1, s2) == (7, 8, 7)
    assert w0 == w2 and w0 != w1
    assert trainer.args.seed == 123  # the search leaves the trainer's own arguments as they were


def test_trial_state_and_output_dir(tmp_path):
    """Each trial's state records trial_name and trial_params; its checkpoints go to output_dir/run-{n}."""
    seen = []

    class Spy(TrainerCallback):
        def on_train_begin(self, args, state, control, **kwargs):
            seen.append(
                (
                    state.trial_name,
                    dict(state.trial_params),
                    state.is_hyper_param_search,
                    args.learning_rate,
                    trainer._get_output_dir(trainer._trial),
                )
            )

    trainer = make_trainer(tmp_path, callbacks=[Spy()])
    best = trainer.hyperparameter_search(
        hp_space=lr_space, n_trials=2, backend="optuna", hp_name=lambda t: f"trial-{t.number}"
    )
    for number, (name, params, is_search, lr, out) in enumerate(seen):
        assert name == f"trial-{number}" and is_search
        assert params == best.run_summary.trials[number].params and lr == params["learning_rate"]
        assert out == str(tmp_path / "out" / f"trial-{number}")


def test_default_run_dir_is_run_trial_number(tmp_path):
    """Without hp_name a trial's folder is output_dir/run-{trial number}, as in transformers."""
    dirs = []
    trainer = make_trainer(tmp_path)
    trainer.model_init = lambda trial: dirs.append(trainer._get_output_dir(trial)) or RegressionModel()
    trainer.hyperparameter_search(hp_space=lr_space, n_trials=2, backend="optuna")
    assert dirs == [str(tmp_path / "out" / "run-0"), str(tmp_path / "out" / "run-1")]


def test_trial_checkpoints_are_written_under_run_dirs(tmp_path):
    """With saving on, trial n writes output_dir/run-{n}/checkpoint-{step}, holding its trial_name/params."""
    trainer = make_trainer(tmp_path, save_strategy="epoch")
    trainer.hyperparameter_search(hp_space=lr_space, n_trials=2, backend="optuna")
    out = tmp_path / "out"
    assert sorted(p.name for p in out.iterdir()) == ["run-0", "run-1"]
    for number in range(2):
        state = json.loads((out / f"run-{number}" / "checkpoint-4" / "trainer_state.json").read_text())
        assert state["is_hyper_param_search"] and set(state["trial_params"]) == {"learning_rate"}


def test_search_restores_the_trainers_arguments(tmp_path):
    """After the search, trainer.args is the original object with its original values."""
    trainer = make_trainer(tmp_path)
    args = trainer.args
    trainer.hyperparameter_search(hp_space=lr_space, n_trials=1, backend="optuna")
    assert trainer.args is args and args.learning_rate == 0.1 and trainer.hp_search_backend is None


def test_hyperparameters_are_cast_to_the_argument_types(tmp_path, caplog):
    """Values are cast like transformers (2.0 epochs -> 2); keys that are not arguments only warn."""
    seen = []
    trainer = make_trainer(tmp_path)
    trainer.model_init = lambda trial: seen.append(trainer.args.num_train_epochs) or RegressionModel()
    space = lambda t: {"num_train_epochs": t.suggest_float("num_train_epochs", 2.0, 2.0), "hidden": 3}  # noqa: E731
    with caplog.at_level(logging.WARNING, logger="hf_lightning.trainer.hpsearch"):
        trainer.hyperparameter_search(hp_space=space, n_trials=1, backend="optuna")
    assert seen == [2] and isinstance(seen[0], int)
    assert "'hidden'" in caplog.text


def test_uncastable_hyperparameter_names_the_argument(tmp_path):
    """A value that cannot take the argument's type raises a ValueError naming the argument."""
    trainer = make_trainer(tmp_path)
    space = lambda t: {"learning_rate": t.suggest_categorical("learning_rate", ["fast"])}  # noqa: E731
    with pytest.raises(ValueError, match=r"learning_rate='fast'.*TrainingArguments.learning_rate"):
        trainer.hyperparameter_search(hp_space=space, n_trials=1, backend="optuna")


def test_optimize_kwargs_reach_optuna(tmp_path):
    """timeout goes to Study.optimize: an already elapsed timeout runs no trial, reported clearly."""
    trainer = make_trainer(tmp_path)
    with pytest.raises(RuntimeError, match=r"without a completed trial \(no trials\)"):
        trainer.hyperparameter_search(
            hp_space=lr_space, n_trials=5, backend="optuna", timeout=1e-9, gc_after_trial=True
        )


def test_create_study_kwargs_reach_optuna(tmp_path):
    """sampler and study_name go to optuna.create_study."""
    trainer = make_trainer(tmp_path)
    best = trainer.hyperparameter_search(
        hp_space=lr_space,
        n_trials=1,
        backend="optuna",
        study_name="named",
        sampler=optuna.samplers.RandomSampler(seed=0),
    )
    assert isinstance(best.run_summary.sampler, optuna.samplers.RandomSampler)
    assert best.run_summary.study_name == "named"


def test_n_jobs_runs_trials_on_copies_of_the_trainer(tmp_path):
    """n_jobs=2 trains each trial on its own copy; the trainer itself keeps its model."""
    trainer = make_trainer(tmp_path)
    model = trainer.model
    best = trainer.hyperparameter_search(hp_space=lr_space, n_trials=2, backend="optuna", n_jobs=2)
    assert len(best.run_summary.trials) == 2 and trainer.model is model


def test_default_space_is_used_without_hp_space(tmp_path):
    """Without hp_space the default Optuna space (learning rate, epochs, seed, batch size) is searched."""
    trainer = make_trainer(tmp_path)
    best = trainer.hyperparameter_search(
        n_trials=1, backend="optuna", sampler=optuna.samplers.RandomSampler(seed=0)
    )
    assert set(best.hyperparameters) == {
        "learning_rate",
        "num_train_epochs",
        "seed",
        "per_device_train_batch_size",
    }


@pytest.mark.parametrize(
    "call, error, message",
    [
        (dict(backend="wandb"), ValueError, "backend='wandb'.*choose one of: 'optuna', 'ray'"),
        (dict(direction="down"), ValueError, "direction='down'"),
        (dict(direction=[]), ValueError, r"direction=\[\]"),
        (dict(n_trials=0), ValueError, "n_trials=0"),
        (
            dict(direction=["minimize", "maximize"], backend="ray"),
            ValueError,
            "several objectives need backend='optuna'",
        ),
        (dict(backend="optuna", foo=1), ValueError, "hyperparameter_search\\(foo=...\\).*create_study"),
    ],
)
def test_bad_calls_raise_clear_errors(tmp_path, call, error, message):
    """Bad arguments raise an error naming the argument and the allowed values."""
    call = dict(call)
    with pytest.raises(error, match=message):
        make_trainer(tmp_path).hyperparameter_search(
            hp_space=lr_space, n_trials=call.pop("n_trials", 1), **call
        )


def test_search_needs_model_init(tmp_path):
    """A trainer built with model= instead of model_init= cannot search."""
    args = TrainingArguments(output_dir=str(tmp_path), report_to="none")
    trainer = Trainer(model=RegressionModel(), args=args, train_dataset=regression_data(8))
    with pytest.raises(RuntimeError, match="model_init"):
        trainer.hyperparameter_search(backend="optuna")


@pytest.fixture
def installed(monkeypatch):
    """Pretend only the given top-level packages are installed."""
    real = importlib.util.find_spec

    def only(*names):
        monkeypatch.setattr(
            hpsearch.importlib.util,
            "find_spec",
            lambda name, *a: real(name, *a) if name.split(".")[0] in names else None,
        )

    return only


@pytest.mark.parametrize(
    "packages, expected", [(("optuna", "ray"), "optuna"), (("ray",), "ray"), (("optuna",), "optuna")]
)
def test_default_backend_follows_transformers_order(installed, packages, expected):
    """The default backend is the first installed of optuna, ray."""
    installed(*packages)
    assert hpsearch.default_hp_search_backend() == expected


@pytest.mark.parametrize("backend, extra", [("optuna", "optuna"), ("ray", "ray")])
def test_missing_backend_names_the_extra(tmp_path, installed, backend, extra):
    """A backend that is not installed raises ImportError naming the pip extra."""
    installed()
    with pytest.raises(ImportError, match=f'pip install "hf-lightning\\[{extra}\\]"'):
        make_trainer(tmp_path).hyperparameter_search(backend=backend)


def test_no_backend_installed_lists_both_extras(tmp_path, installed):
    """Without any backend, the error lists how to install each."""
    installed()
    with pytest.raises(ImportError, match=r"hf-lightning\[optuna\].*\n.*hf-lightning\[ray\]"):
        make_trainer(tmp_path).hyperparameter_search()


def test_train_with_a_trial_outside_a_search_changes_nothing(tmp_path):
    """train(trial=...) without a running search applies nothing, as in transformers."""
    trainer = make_trainer(tmp_path)
    trainer.train(trial={"learning_rate": 0.3})
    assert trainer.args.learning_rate == 0.1
    assert trainer.state.is_hyper_param_search and trainer.state.trial_params == {"learning_rate": 0.3}


class ScaledLossTrainer(Trainer):
    """A subclass with a constructor argument of its own, before transformers' ones; records each loss it
    computes as (trainer, loss_scale, learning_rate)."""

    seen: list = []

    def __init__(self, loss_scale, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.loss_scale = loss_scale

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        ScaledLossTrainer.seen.append((self, self.loss_scale, self.args.learning_rate))
        loss = super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        return (loss[0] * self.loss_scale, loss[1]) if return_outputs else loss * self.loss_scale


@pytest.mark.parametrize("positional", [False, True], ids=["keywords", "args-positional"])
def test_parallel_trials_rebuild_a_subclass_from_its_constructor_inputs(tmp_path, positional):
    """n_jobs=2 trains each trial on a fresh trainer of the subclass, built from what the subclass's own
    __init__ received (loss_scale included), holding the trial's learning rate; the original is untouched."""
    args = TrainingArguments(**{**HP_SEARCH_ARGS, "output_dir": str(tmp_path / "out")})
    data = {"train_dataset": regression_data(32), "eval_dataset": regression_data(16, seed=1)}
    init = lambda: RegressionModel()  # noqa: E731
    if positional:  # model=None and args through the subclass's *args
        trainer = ScaledLossTrainer(3.0, None, args, model_init=init, **data)
    else:
        trainer = ScaledLossTrainer(loss_scale=3.0, args=args, model_init=init, **data)
    model, ScaledLossTrainer.seen = trainer.model, []
    best = trainer.hyperparameter_search(hp_space=lr_space, n_trials=2, backend="optuna", n_jobs=2)
    used = {id(t): (type(t), scale, lr) for t, scale, lr in ScaledLossTrainer.seen}
    trial_lrs = sorted(t.params["learning_rate"] for t in best.run_summary.trials)
    assert len(used) == 2 and id(trainer) not in used
    assert sorted(lr for _, _, lr in used.values()) == pytest.approx(trial_lrs)
    assert {(cls, scale) for cls, scale, _ in used.values()} == {(ScaledLossTrainer, 3.0)}
    assert trainer.model is model and trainer.args is args and trainer.state.global_step == 0
