"""Parity of ``report_to="tensorboard"`` with transformers' TensorBoardCallback (transformers 5.24).

The same short run (tiny GPT-2, logging every step, evaluation every 2 steps) then a standalone
``evaluate()``, with both trainers; the event files are read back with TensorBoard's
``EventAccumulator`` and compared: run folder, scalar tags, values per step, text summaries.
"""

from __future__ import annotations

import math
import re
import socket
from pathlib import Path
from typing import Any

import pytest
import transformers
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

import hf_lightning
from tests.parity._run import BASE_ARGS
from tests.tiny import causal_lm_data, tiny_gpt2

LIBS = {"hf": transformers, "ours": hf_lightning}
RUN_FOLDER = re.compile(r"^[A-Z][a-z]{2}\d{2}_\d{2}-\d{2}-\d{2}_" + re.escape(socket.gethostname()) + "$")
TIMINGS = ("runtime", "per_second")


def _trainer(name: str, output_dir: Path, **overrides: Any) -> Any:
    lib = LIBS[name]
    settings = dict(
        max_steps=4,
        per_device_train_batch_size=4,
        per_device_eval_batch_size=4,
        logging_steps=1,
        eval_strategy="steps",
        eval_steps=2,
        learning_rate=1e-3,
    )
    args = lib.TrainingArguments(
        output_dir=str(output_dir), **{**BASE_ARGS, "report_to": "tensorboard", **settings, **overrides}
    )
    return lib.Trainer(
        model=tiny_gpt2(fix_hf_count=True, dropout=0.0),
        args=args,
        train_dataset=causal_lm_data(16, ragged=False),
        eval_dataset=causal_lm_data(8, seed=1, ragged=False),
    )


def _events(log_dir: Path) -> EventAccumulator:
    events = EventAccumulator(str(log_dir), size_guidance={"scalars": 0, "tensors": 0})
    events.Reload()
    return events


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    """Each library's TensorBoard run folder after train() then evaluate()."""
    tmp_path = tmp_path_factory.mktemp("tb")
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv("TENSORBOARD_LOGGING_DIR", raising=False)
        patch.chdir(tmp_path)
        folders = {}
        for name in LIBS:
            trainer = _trainer(name, tmp_path / name)
            trainer.train()
            trainer.evaluate()
            folders[name] = tmp_path / name / "runs"
    return folders


def test_run_folder_is_runs_date_host(runs):
    """Both write one folder output_dir/runs/<Mon DD_HH-MM-SS>_<host>."""
    for name, runs_dir in runs.items():
        (folder,) = list(runs_dir.iterdir())
        assert RUN_FOLDER.match(folder.name), (name, folder.name)


def test_same_scalar_tags(runs):
    """The scalar tags (train/loss, eval/loss, train/train_runtime, ...) are the same set."""
    tags = {name: set(_events(next(d.iterdir())).Tags()["scalars"]) for name, d in runs.items()}
    assert "train/loss" in tags["hf"] and "eval/loss" in tags["hf"]
    assert tags["ours"] == tags["hf"]


def test_same_values_per_step(runs):
    """Every scalar tag holds the same steps and (timings aside) the same values."""
    events = {name: _events(next(d.iterdir())) for name, d in runs.items()}
    for tag in events["hf"].Tags()["scalars"]:
        theirs = [(e.step, e.value) for e in events["hf"].Scalars(tag)]
        mine = [(e.step, e.value) for e in events["ours"].Scalars(tag)]
        assert [s for s, _ in mine] == [s for s, _ in theirs], tag
        if not any(word in tag for word in TIMINGS):
            for (_, a), (_, b) in zip(theirs, mine):
                assert math.isclose(b, a, rel_tol=1e-4, abs_tol=1e-6), tag


def test_standalone_evaluate_is_logged(runs):
    """The evaluate() after training adds a third eval/loss point at the final step."""
    for runs_dir in runs.values():
        steps = [e.step for e in _events(next(runs_dir.iterdir())).Scalars("eval/loss")]
        assert steps == [2, 4, 4]


def test_text_summaries_exist(runs):
    """The arguments and the model config are written as text summaries."""
    for name, runs_dir in runs.items():
        tensors = set(_events(next(runs_dir.iterdir())).Tags()["tensors"])
        assert {"args/text_summary", "model_config/text_summary"} <= tensors, name


def test_logging_dir_from_env(tmp_path, monkeypatch):
    """TENSORBOARD_LOGGING_DIR is where both write, directly (no runs/<date> folder)."""
    monkeypatch.chdir(tmp_path)
    for name in LIBS:
        monkeypatch.setenv("TENSORBOARD_LOGGING_DIR", str(tmp_path / "tb" / name))
        _trainer(name, tmp_path / name, eval_strategy="no", max_steps=2).train()
        assert _events(tmp_path / "tb" / name).Tags()["scalars"], name
        assert not (tmp_path / name / "runs").exists()


def test_evaluate_before_training_writes_in_working_directory(tmp_path, monkeypatch):
    """An evaluate() before any train() writes under ./runs/<date>_<host>, as a bare SummaryWriter does."""
    monkeypatch.delenv("TENSORBOARD_LOGGING_DIR", raising=False)
    for name in LIBS:
        (tmp_path / name).mkdir()
        monkeypatch.chdir(tmp_path / name)
        _trainer(name, tmp_path / name / "out").evaluate()
        (folder,) = list((tmp_path / name / "runs").iterdir())
        assert RUN_FOLDER.match(folder.name)
        assert [e.step for e in _events(folder).Scalars("eval/loss")] == [0]


def _search_space(trial):
    return {"learning_rate": trial.suggest_categorical("learning_rate", [0.2])}


def test_search_trials_write_one_folder_each(tmp_path, monkeypatch):
    """In hyperparameter_search each trial writes output_dir/runs/<date>_<host>/<trial name>."""
    from tests.tiny import RegressionModel, regression_data

    monkeypatch.delenv("TENSORBOARD_LOGGING_DIR", raising=False)
    layouts = {}
    for name, lib in LIBS.items():
        args = lib.TrainingArguments(
            output_dir=str(tmp_path / name),
            **{**BASE_ARGS, "report_to": "tensorboard", "num_train_epochs": 1, "eval_strategy": "epoch"},
        )
        trainer = lib.Trainer(
            model_init=lambda: RegressionModel(),
            args=args,
            train_dataset=regression_data(16),
            eval_dataset=regression_data(8, seed=1),
        )
        trainer.hyperparameter_search(
            hp_space=_search_space,
            n_trials=2,
            backend="optuna",
            hp_name=lambda trial: f"trial-{trial.number}",
        )
        trials = sorted(
            path.parent.name for path in (tmp_path / name / "runs").rglob("events.out.tfevents.*")
        )
        layouts[name] = trials
        for folder in (tmp_path / name / "runs").iterdir():
            assert RUN_FOLDER.match(folder.name)
    assert layouts["ours"] == layouts["hf"] == ["trial-0", "trial-1"]
