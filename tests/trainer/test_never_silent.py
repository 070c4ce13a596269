"""Faults and bad input that transformers 5.24 meets silently, late or with a message that does not say what
happened; here each is an error or a warning naming the field, folder or file (docs/divergences.md)."""

from __future__ import annotations

import shutil

import pytest
import torch
import transformers

import hf_lightning
from tests.tiny import RegressionModel, regression_data

BASE = dict(report_to="none", use_cpu=True, disable_tqdm=True, seed=0, per_device_train_batch_size=4)


def _trainer(lib, output_dir, **kwargs):
    args = lib.TrainingArguments(output_dir=str(output_dir), **{**BASE, **kwargs})
    return lib.Trainer(model=RegressionModel(), args=args, train_dataset=regression_data(8))


# --- output_dir ------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("below", "error"), [(False, FileExistsError), (True, NotADirectoryError)])
def test_output_dir_that_is_a_file_is_refused_at_construction(tmp_path, below, error):
    """Trainer() raises transformers' exception type at once (it fails in its own makedirs), naming output_dir."""
    file = tmp_path / "afile"
    file.write_text("not a folder")
    output_dir = file / "sub" if below else file
    with pytest.raises(error):  # parity: transformers fails in Trainer.__init__ too
        _trainer(transformers, output_dir, max_steps=2)
    with pytest.raises(
        error, match=rf"output_dir='{output_dir}'.*{'lies inside' if below else 'is an existing file'}"
    ):
        _trainer(hf_lightning, output_dir, max_steps=2)


@pytest.mark.parametrize("lib", [transformers, hf_lightning], ids=["transformers", "hf_lightning"])
def test_output_dir_is_created_at_construction(tmp_path, lib):
    """Trainer() creates a missing output_dir (and its parents): an evaluate- or predict-only script writes its
    results there without creating it first."""
    output_dir = tmp_path / "new" / "run"
    _trainer(lib, output_dir, max_steps=2)
    assert output_dir.is_dir()


# --- degenerate data ------------------------------------------------------------------------------------
class Stream(torch.utils.data.IterableDataset):
    """A stream of ``n`` regression examples (no length)."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __iter__(self):
        return iter(regression_data(self.n)) if self.n else iter([])


def _stream_trainer(lib, output_dir, n: int, **kwargs):
    args = lib.TrainingArguments(output_dir=str(output_dir), **{**BASE, "max_steps": 5, **kwargs})
    return lib.Trainer(model=RegressionModel(), args=args, train_dataset=Stream(n))


def test_empty_stream_raises_before_any_step_naming_dataset_max_steps_and_drop_last(tmp_path):
    """An empty IterableDataset with max_steps: ValueError naming the stream, max_steps and
    dataloader_drop_last. transformers raises too (accelerate's "Batch does not contain any data")."""
    with pytest.raises(ValueError, match="does not contain any data"):  # parity: an error there as well
        _stream_trainer(transformers, tmp_path / "hf", 0).train()
    trainer = _stream_trainer(hf_lightning, tmp_path / "out", 0)
    with pytest.raises(
        ValueError, match=r"\(Stream\) yielded no batch.*`max_steps=5`.*dataloader_drop_last=False"
    ):
        trainer.train()
    assert trainer.state.global_step == 0


def test_stream_shorter_than_a_dropped_batch_raises_naming_drop_last(tmp_path):
    """3 examples, batches of 4, dataloader_drop_last=True: no complete batch, so ValueError naming
    dataloader_drop_last and the batch size (transformers ignores drop_last for a stream and trains on the
    partial batch: divergence 11)."""
    assert (
        _stream_trainer(transformers, tmp_path / "hf", 3, dataloader_drop_last=True).train().global_step == 5
    )
    trainer = _stream_trainer(hf_lightning, tmp_path / "out", 3, dataloader_drop_last=True)
    with pytest.raises(ValueError, match=r"per_device_train_batch_size=4.*`dataloader_drop_last=True` drops"):
        trainer.train()


def test_stream_that_ends_after_some_steps_warns_with_transformers_words(tmp_path, caplog):
    """A stream exhausted before max_steps, once some steps ran: transformers' warning, training stops."""

    class OneShot(torch.utils.data.IterableDataset):
        def __init__(self) -> None:
            self.used = False

        def __iter__(self):
            data, self.used = ([] if self.used else regression_data(8)), True
            return iter(data)

    args = hf_lightning.TrainingArguments(output_dir=str(tmp_path), **{**BASE, "max_steps": 5})
    trainer = hf_lightning.Trainer(model=RegressionModel(), args=args, train_dataset=OneShot())
    with caplog.at_level("WARNING"):
        assert trainer.train().global_step == 2
    assert (
        "There seems not to be a single sample in your epoch_iterator, stopping training at step 2"
        in caplog.text
    )


def test_empty_evaluation_set_warns_naming_the_dataset_and_step(tmp_path, caplog):
    """evaluate() on an empty eval set warns (transformers returns the metrics of nothing silently)."""
    for lib in (transformers, hf_lightning):
        trainer = _trainer(lib, tmp_path / lib.__name__, max_steps=1)
        with caplog.at_level("WARNING"):
            caplog.clear()
            metrics = trainer.evaluate(eval_dataset=[])
        assert "eval_loss" not in metrics  # parity: no loss of nothing
        said = "the eval dataset is empty" in caplog.text
        assert said == (lib is hf_lightning), caplog.text
    assert "Evaluation at step 0" in caplog.text


def _ignored_labels_trainer(lib, output_dir, ignored_rows: int, **kwargs):
    from tests.tiny import tiny_llama

    data = [
        {
            "input_ids": torch.arange(8),
            "labels": torch.full((8,), -100) if i < ignored_rows else torch.arange(8),
        }
        for i in range(8)
    ]
    settings = {**BASE, "max_steps": 2, "logging_steps": 1, **kwargs}
    return lib.Trainer(
        model=tiny_llama(), args=lib.TrainingArguments(str(output_dir), **settings), train_dataset=data
    )


def test_all_ignored_labels_warn_naming_the_step_and_the_dataset(tmp_path, caplog):
    """Labels all -100: a warning naming step 1 and, at the end, that every step had no target; not the
    non-finite-loss warning (the NaN is 0/0, the weights stay finite). transformers logs loss 0.0 silently."""
    theirs = _ignored_labels_trainer(transformers, tmp_path / "hf", 8)
    theirs.train()
    assert [h["loss"] for h in theirs.state.log_history if "loss" in h] == [0.0, 0.0]  # parity: looks fine
    ours = _ignored_labels_trainer(hf_lightning, tmp_path / "out", 8)
    with caplog.at_level("WARNING"):
        ours.train()
    assert [h["loss"] for h in ours.state.log_history if "loss" in h] == [0.0, 0.0]
    assert "Step 1: every label of this step's batch is ignored (-100)" in caplog.text
    assert "Every one of the 2 training steps of this run had only ignored labels" in caplog.text
    assert "weights are likely non-finite" not in caplog.text


def test_one_step_with_ignored_labels_is_counted(tmp_path, caplog):
    """Only the first step's batch is all -100: it is warned, and the end counts 1 of 2 steps."""
    ours = _ignored_labels_trainer(hf_lightning, tmp_path, 4, train_sampling_strategy="sequential")
    with caplog.at_level("WARNING"):
        ours.train()
    assert "Step 1: every label" in caplog.text and "Step 2: every label" not in caplog.text
    assert (
        "1 of the 2 training steps of this run had only ignored labels (-100) (first: step 1)" in caplog.text
    )


# --- save_model with non-finite weights ------------------------------------------------------------------
def test_save_model_with_nan_weights_warns_naming_the_tensors_and_what_it_replaces(tmp_path, caplog):
    """save_model() writes what it is asked (as transformers does, silently there) but warns naming each
    non-finite tensor and the finite weights it replaces in that folder."""
    trainer = _trainer(hf_lightning, tmp_path, max_steps=1)
    trainer.save_model()
    with caplog.at_level("WARNING"):
        trainer.save_model()
    assert "NaN" not in caplog.text  # finite weights: nothing to say
    with torch.no_grad():
        trainer.model.b.fill_(float("nan"))
    with caplog.at_level("WARNING"):
        trainer.save_model()
    assert f"the weights written to `{tmp_path}` hold NaN or infinite values (`b`)" in caplog.text
    assert "they replace the weights that were in that folder (model.safetensors)" in caplog.text
    from safetensors.torch import load_file

    assert torch.isnan(load_file(str(tmp_path / "model.safetensors"))["b"])  # written as asked


# --- resume mismatches -----------------------------------------------------------------------------------
def _resumable(output_dir, **kwargs):
    return _trainer(hf_lightning, output_dir, **{"max_steps": 4, "save_steps": 2, "learning_rate": 0.1,
                                                 "lr_scheduler_type": "linear", "logging_steps": 1, **kwargs})  # fmt: skip


@pytest.fixture
def checkpointed(tmp_path):
    """output_dir holding checkpoint-2 and checkpoint-4 of a 4-step run (8 examples, batches of 4)."""
    _resumable(tmp_path).train()
    return tmp_path


def test_resume_beyond_max_steps_warns_with_both_numbers(checkpointed, caplog):
    """A max_steps the checkpoint already reached: train() returns at once (as transformers, silently)."""
    with caplog.at_level("WARNING"):
        output = _resumable(checkpointed, max_steps=3).train(
            resume_from_checkpoint=str(checkpointed / "checkpoint-4")
        )
    assert output.global_step == 4
    assert "at step 4, but this run trains 3 steps" in caplog.text


@pytest.mark.parametrize(
    ("kwargs", "said"),
    [
        (dict(learning_rate=0.01), "learning_rate: 0.01 (from args) != 0.1 (checkpoint): the checkpoint's 0.1 applies"),
        (dict(lr_scheduler_type="constant"), "lr_scheduler_type: 'constant' (from args) != 'linear' (checkpoint): the schedule of the arguments applies from step 4 on"),
        (dict(warmup_steps=2), "warmup_steps: 2 (from args) != 0 (checkpoint)"),
    ],
)  # fmt: skip
def test_resume_with_another_schedule_warns_which_one_applies(checkpointed, caplog, kwargs, said):
    """The learning rates logged after the resume are the ones the warning announces."""
    resumed = _resumable(checkpointed, max_steps=4, **kwargs)
    with caplog.at_level("WARNING"):
        resumed.train(resume_from_checkpoint=str(checkpointed / "checkpoint-2"))
    assert said in caplog.text
    rates = [h["learning_rate"] for h in resumed.state.log_history if "loss" in h]
    if "learning_rate" in kwargs:
        assert rates[2:] == pytest.approx([0.05, 0.025])  # the checkpoint's peak 0.1, linearly to 0 at step 4
    elif kwargs.get("lr_scheduler_type") == "constant":
        assert rates[2:] == pytest.approx([0.05, 0.1])  # step 3 keeps the stored rate, then the new schedule


def test_resume_with_another_batch_layout_warns_what_changes_in_the_data(checkpointed, caplog):
    """Another per-device batch: besides transformers' warning, one naming both layouts and the data order."""
    with caplog.at_level("WARNING"):
        _resumable(checkpointed, per_device_train_batch_size=2).train(
            resume_from_checkpoint=str(checkpointed / "checkpoint-2")
        )
    assert (
        "per_device_train_batch_size: 2 (from args) != 4 (from trainer_state.json)" in caplog.text
    )  # theirs
    assert (
        "written by 1 process(es) x per_device_train_batch_size 4 x gradient_accumulation_steps 1"
        in caplog.text
    )
    assert "some samples of this epoch are trained twice, others not at all" in caplog.text


def test_resume_of_a_two_process_checkpoint_by_one_process_warns(checkpointed, caplog):
    """A checkpoint with rng_state_0.pth and rng_state_1.pth (written by 2 processes) resumed by one."""
    folder = checkpointed / "checkpoint-2"
    (folder / "rng_state.pth").rename(folder / "rng_state_0.pth")
    shutil.copy(folder / "rng_state_0.pth", folder / "rng_state_1.pth")
    with caplog.at_level("WARNING"):
        _resumable(checkpointed).train(resume_from_checkpoint=str(folder))
    assert (
        "written by 2 process(es) x per_device_train_batch_size 4 x gradient_accumulation_steps 1 (8 samples per step); this run has 1 x 4 x 1 (4 per step)"
        in caplog.text
    )


# --- compute_metrics --------------------------------------------------------------------------------------
@pytest.mark.parametrize("returned", [None, [0.5]], ids=["None", "list"])
def test_compute_metrics_that_returns_no_dict_is_named(tmp_path, returned):
    """compute_metrics returning no dict: a TypeError on both; here it names compute_metrics and the type."""
    for lib in (transformers, hf_lightning):
        args = lib.TrainingArguments(output_dir=str(tmp_path / lib.__name__), **BASE)
        trainer = lib.Trainer(model=RegressionModel(), args=args, eval_dataset=regression_data(8),
                              compute_metrics=lambda prediction: returned)  # fmt: skip
        match = rf"`compute_metrics` returned {type(returned).__name__}" if lib is hf_lightning else None
        with pytest.raises(TypeError, match=match):
            trainer.evaluate()
