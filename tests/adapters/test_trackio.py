"""report_to="trackio": the run's metrics, config and project in Trackio's local store."""

from __future__ import annotations

import sys
import uuid

import pytest

from hf_lightning import Trainer, TrainingArguments
from tests.tiny import RegressionModel, regression_data


@pytest.fixture(autouse=True)
def _trackio_installed(request):
    """The Trackio runs need the "trackio" extra (part of the test extra)."""
    if "missing" not in request.node.name:
        pytest.importorskip("trackio")


def _run(tmp_path, project: str) -> Trainer:
    args = TrainingArguments(
        output_dir=str(tmp_path / "out"),
        use_cpu=True,
        report_to="trackio",
        project=project,
        run_name="tiny-run",
        disable_tqdm=True,
        per_device_train_batch_size=4,
        max_steps=4,
        logging_steps=1,
        eval_strategy="steps",
        eval_steps=2,
        save_strategy="no",
        learning_rate=0.1,
        trackio_static_space_id=False,
    )
    trainer = Trainer(
        model=RegressionModel(),
        args=args,
        train_dataset=regression_data(32),
        eval_dataset=regression_data(8, 1),
    )
    trainer.train()
    return trainer


def _stored_logs(project: str) -> list[dict]:
    from trackio.sqlite_storage import SQLiteStorage

    return SQLiteStorage.get_logs(project, "tiny-run")


def test_metrics_read_back_equal_log_history(tmp_path):
    """Every logged metric (train/ and eval/ names) is in Trackio's local store, at its step."""
    project = f"hf-lightning-{uuid.uuid4().hex[:8]}"
    trainer = _run(tmp_path, project)
    stored = _stored_logs(project)
    summary = {
        "train_runtime",
        "train_samples_per_second",
        "train_steps_per_second",
        "train_loss",
        "total_flos",
    }
    expected = []
    for entry in trainer.state.log_history:
        kept = {k: v for k, v in entry.items() if k not in summary and k != "step"}
        names = {
            (k.replace("eval_", "eval/", 1) if k.startswith("eval_") else f"train/{k}"): v
            for k, v in kept.items()
        }
        expected.append({**names, "train/global_step": entry["step"]})
    assert len(stored) == len(expected) == 7  # 4 losses, 2 evaluations, the end-of-training entry
    got = [{k: v for k, v in row.items() if k in expected[i]} for i, row in enumerate(stored)]
    assert got == expected


def test_arguments_are_the_run_config(tmp_path):
    """The run's config holds the TrainingArguments (learning_rate, project)."""
    from trackio.sqlite_storage import SQLiteStorage

    project = f"hf-lightning-{uuid.uuid4().hex[:8]}"
    _run(tmp_path, project)
    config = SQLiteStorage.get_run_config(project, "tiny-run")
    assert config["learning_rate"] == 0.1
    assert config["project"] == project


def test_missing_trackio_names_the_extra(tmp_path, monkeypatch):
    """Without the trackio package, report_to="trackio" raises ImportError naming the pip extra."""
    monkeypatch.setitem(sys.modules, "trackio", None)
    args = TrainingArguments(output_dir=str(tmp_path), report_to="trackio", use_cpu=True)
    with pytest.raises(ImportError, match=r"hf-lightning\[trackio\]"):
        Trainer(model=RegressionModel(), args=args)
