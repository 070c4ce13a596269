"""Trainer utilities: outputs, seeding, checkpoint discovery, metric helpers, memory tracking, batch-size finder."""

from __future__ import annotations

import functools
import logging
import os
import random
import sys

import numpy as np
import pytest
import safetensors.torch
import torch

from hf_lightning import trainer_utils, trainer_utils_memory
from hf_lightning.trainer_utils import (
    INCOMPLETE_CHECKPOINT_MARKER,
    PREFIX_CHECKPOINT_DIR,
    BestRun,
    EvalLoopOutput,
    EvalPrediction,
    PredictionOutput,
    TrainerMemoryTracker,
    TrainOutput,
    default_compute_objective,
    denumpify_detensorize,
    enable_full_determinism,
    find_executable_batch_size,
    get_last_checkpoint,
    get_model_param_count,
    has_length,
    number_of_arguments,
    seed_worker,
    set_seed,
    speed_metrics,
)

# --- Outputs ---


@pytest.mark.parametrize(
    "extra, expected",
    [
        ({}, ("p", "l")),
        ({"inputs": "i"}, ("p", "l", "i")),
        ({"losses": "x"}, ("p", "l", "x")),
        ({"inputs": "i", "losses": "x"}, ("p", "l", "i", "x")),
    ],
)
def test_eval_prediction_unpacks_present_fields(extra, expected):
    """EvalPrediction unpacks and indexes as the tuple of the fields that are not None."""
    pred = EvalPrediction("p", "l", **extra)
    assert tuple(pred) == expected
    assert [pred[i] for i in range(len(expected))] == list(expected)
    assert (pred.predictions, pred.label_ids) == ("p", "l")


@pytest.mark.parametrize("idx", [-1, 2])
def test_eval_prediction_index_out_of_range(idx):
    """Negative or too-large indices raise IndexError, as transformers' does."""
    with pytest.raises(IndexError):
        EvalPrediction("p", "l")[idx]


def test_output_tuples_have_transformers_fields():
    """The output named tuples carry transformers' field names; BestRun.run_summary defaults to None."""
    assert TrainOutput._fields == ("global_step", "training_loss", "metrics")
    assert PredictionOutput._fields == ("predictions", "label_ids", "metrics")
    assert EvalLoopOutput._fields == ("predictions", "label_ids", "metrics", "num_samples")
    assert BestRun("1", 0.5, {"lr": 1}).run_summary is None
    assert PREFIX_CHECKPOINT_DIR == "checkpoint"


def test_strategy_enums_are_reexported():
    """IntervalStrategy, SaveStrategy, SchedulerType and HubStrategy come from hf_lightning.args.enums."""
    from hf_lightning import enums

    for name in ("IntervalStrategy", "SaveStrategy", "SchedulerType", "HubStrategy"):
        assert getattr(trainer_utils, name) is getattr(enums, name)


def test_process_helpers_and_search_names_as_transformers():
    """``is_main_process`` / ``total_processes_number`` answer as transformers' on one process; the search's
    backend enum is importable from ``trainer_utils``, as there, and is the one ``hyperparameter_search`` takes."""
    import transformers.trainer_utils as theirs

    from hf_lightning.trainer.hpsearch import HPSearchBackend

    for rank in (-1, 0, 1, 3):
        assert trainer_utils.is_main_process(rank) == theirs.is_main_process(rank)
        assert trainer_utils.total_processes_number(rank if rank < 1 else -1) == 1
    assert trainer_utils.HPSearchBackend("optuna").value == theirs.HPSearchBackend("optuna").value
    assert trainer_utils.HPSearchBackend is HPSearchBackend


# --- Seeding ---


def _draws():
    return random.random(), float(np.random.rand()), float(torch.rand(1))


def test_set_seed_makes_draws_reproducible():
    """The same seed gives the same random, NumPy and torch draws; another seed differs."""
    set_seed(123)
    first = _draws()
    set_seed(123)
    assert _draws() == first
    set_seed(124)
    assert _draws() != first


@pytest.fixture
def deterministic_calls(monkeypatch):
    """Record torch.use_deterministic_algorithms calls instead of changing the process (and restore cuDNN)."""
    for name in ("CUDA_LAUNCH_BLOCKING", "CUBLAS_WORKSPACE_CONFIG", "FLASH_ATTENTION_DETERMINISTIC"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(torch.backends.cudnn, "deterministic", torch.backends.cudnn.deterministic)
    monkeypatch.setattr(torch.backends.cudnn, "benchmark", torch.backends.cudnn.benchmark)
    calls = []
    monkeypatch.setattr(torch, "use_deterministic_algorithms", lambda mode, **kw: calls.append((mode, kw)))
    return calls


def test_set_seed_deterministic_enables_deterministic_algorithms(deterministic_calls):
    """set_seed(deterministic=True) turns on torch's deterministic algorithms."""
    set_seed(0, deterministic=True)
    assert deterministic_calls == [(True, {})]


@pytest.mark.parametrize("warn_only", [False, True])
def test_enable_full_determinism(deterministic_calls, warn_only):
    """enable_full_determinism seeds, sets the CUDA/cuBLAS variables and deterministic torch/cuDNN."""
    enable_full_determinism(7, warn_only=warn_only)
    assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":16:8" and os.environ["CUDA_LAUNCH_BLOCKING"] == "1"
    assert deterministic_calls == [(True, {"warn_only": warn_only})]
    assert torch.backends.cudnn.deterministic and not torch.backends.cudnn.benchmark


def test_seed_worker_depends_on_rank():
    """Workers of different ranks get different seeds; the same rank the same seed."""
    torch.manual_seed(5)
    seed_worker(0, num_workers=2, rank=1)
    first = _draws()
    torch.manual_seed(5)
    seed_worker(0, num_workers=2, rank=1)
    assert _draws() == first
    torch.manual_seed(5)
    seed_worker(0, num_workers=2, rank=0)
    assert _draws() != first


# --- Checkpoints ---


def _make(folder, name, incomplete=False, is_dir=True):
    path = folder / name
    if not is_dir:
        path.write_text("x")
        return
    path.mkdir()
    # what a complete checkpoint holds (a real safetensors file: resuming checks the content too)
    safetensors.torch.save_file({"w": torch.zeros(1)}, path / "model.safetensors")
    (path / "trainer_state.json").write_text("{}")
    if incomplete:
        (path / INCOMPLETE_CHECKPOINT_MARKER).write_text("")


def test_get_last_checkpoint_skips_folders_missing_files(tmp_path, caplog):
    """A folder without weights or trainer_state.json is skipped too (a crash before the sentinel existed)."""
    _make(tmp_path, "checkpoint-5")
    (tmp_path / "checkpoint-10").mkdir()
    with caplog.at_level(logging.WARNING):
        assert get_last_checkpoint(tmp_path) == os.path.join(tmp_path, "checkpoint-5")
    assert "checkpoint-10" in caplog.text


def test_get_last_checkpoint_takes_highest_number(tmp_path):
    """The checkpoint with the highest step number wins (numerically, not alphabetically)."""
    for name in ("checkpoint-9", "checkpoint-10", "checkpoint-2", "checkpoint-11-tmp", "runs"):
        _make(tmp_path, name)
    _make(tmp_path, "checkpoint-99", is_dir=False)
    assert get_last_checkpoint(tmp_path) == os.path.join(tmp_path, "checkpoint-10")


def test_get_last_checkpoint_skips_incomplete(tmp_path, caplog):
    """Folders still holding checkpoint-is-incomplete.txt are skipped, and the log names them."""
    _make(tmp_path, "checkpoint-5")
    _make(tmp_path, "checkpoint-10", incomplete=True)
    with caplog.at_level(logging.WARNING):
        assert get_last_checkpoint(str(tmp_path)) == os.path.join(tmp_path, "checkpoint-5")
    assert "checkpoint-10" in caplog.text and INCOMPLETE_CHECKPOINT_MARKER in caplog.text


@pytest.mark.parametrize("names", [[], ["checkpoint-3"]])
def test_get_last_checkpoint_none(tmp_path, names):
    """No complete checkpoint gives None."""
    for name in names:
        _make(tmp_path, name, incomplete=True)
    assert get_last_checkpoint(tmp_path) is None


# --- Metrics ---


def test_speed_metrics(monkeypatch):
    """Runtime and per-second rates are rounded and named after the split."""
    monkeypatch.setattr(trainer_utils.time, "time", lambda: 110.0)
    assert speed_metrics("eval", 100.0, num_samples=35, num_steps=3, num_tokens=1000) == {
        "eval_runtime": 10.0,
        "eval_samples_per_second": 3.5,
        "eval_steps_per_second": 0.3,
        "eval_tokens_per_second": 100.0,
    }


def test_speed_metrics_zero_runtime(monkeypatch):
    """A zero runtime reports only the runtime."""
    monkeypatch.setattr(trainer_utils.time, "time", lambda: 5.0)
    assert speed_metrics("train", 5.0, num_samples=3) == {"train_runtime": 0.0}


def test_denumpify_detensorize_nested():
    """NumPy scalars and one-element tensors become Python numbers inside containers."""
    metrics = {"a": np.float32(0.5), "b": [torch.tensor(2), (np.int64(3),)], "c": torch.ones(2)}
    result = denumpify_detensorize(metrics)
    assert result["a"] == 0.5 and type(result["a"]) is float
    assert result["b"] == [2, (3,)] and type(result["b"][0]) is int
    assert torch.equal(result["c"], torch.ones(2))


@pytest.mark.parametrize(
    "metrics, expected",
    [
        ({"eval_loss": 0.5, "epoch": 1.0, "eval_runtime": 3.0, "eval_samples_per_second": 9.0}, 0.5),
        ({"eval_loss": 0.5, "eval_acc": 0.75, "eval_f1": 0.25}, 1.0),
    ],
)
def test_default_compute_objective(metrics, expected):
    """The objective is the loss alone, or the sum of the other metrics when there are any."""
    assert default_compute_objective(metrics) == expected
    assert "epoch" in metrics or "eval_acc" in metrics  # the input is not mutated


@pytest.mark.parametrize("obj, expected", [([1], True), (iter([1]), False), (None, False), (range(0), True)])
def test_has_length(obj, expected):
    """has_length is True only where len() works."""
    assert has_length(obj) is expected


def test_number_of_arguments_counts_unbound_parameters():
    """Plain functions count all parameters; partials only those not yet bound."""

    def f(a, b, c):
        return a

    assert number_of_arguments(f) == 3
    assert number_of_arguments(functools.partial(f, 1, c=2)) == 1


def test_get_model_param_count():
    """All parameters, or only those requiring grad."""
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Linear(4, 2))
    model[0].weight.requires_grad_(False)
    assert get_model_param_count(model) == 16 + 10
    assert get_model_param_count(model, trainable_only=True) == 4 + 10


# --- Batch-size finder ---


@pytest.fixture(autouse=True)
def releases(monkeypatch):
    """Count memory releases between tries instead of running gc (slow) each time."""
    calls = []
    monkeypatch.setattr(trainer_utils_memory, "_release_memory", lambda: calls.append(1))
    return calls


def _fails_above(limit, error_factory, tried):
    def train(batch_size, scale=1):
        tried.append(batch_size)
        if batch_size > limit:
            raise error_factory()
        return batch_size * scale

    return train


@pytest.mark.parametrize(
    "error_factory",
    [
        lambda: torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2 GiB"),
        lambda: RuntimeError("CUDA error: out of memory"),
        lambda: RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 1 bytes"),
    ],
)
def test_find_executable_batch_size_shrinks_on_oom(error_factory, releases):
    """Out-of-memory errors shrink the batch size by 0.9 (as accelerate) until the call succeeds; it is kept."""
    tried = []
    wrapped = find_executable_batch_size(
        _fails_above(100, error_factory, tried), 128, auto_find_batch_size=True
    )
    assert wrapped(scale=2) == 184
    assert tried == [128, 115, 103, 92]
    assert len(releases) == 1 + 3  # once before the first try, once after each failure
    assert wrapped() == 92 and tried[-1] == 92


def test_find_executable_batch_size_reraises_other_errors():
    """Errors unrelated to memory propagate on the first try."""
    tried = []
    wrapped = find_executable_batch_size(_fails_above(0, lambda: ValueError("bad"), tried), 8, True)
    with pytest.raises(ValueError, match="bad"):
        wrapped()
    assert tried == [8]


def test_find_executable_batch_size_gives_up_at_zero():
    """When even batch size 1 runs out of memory, a RuntimeError names the starting batch size."""
    wrapped = find_executable_batch_size(_fails_above(0, lambda: RuntimeError("out of memory"), []), 4, True)
    with pytest.raises(RuntimeError, match="starting_batch_size=4"):
        wrapped()


def test_find_executable_batch_size_without_auto_binds_keyword():
    """Without auto_find_batch_size the function is bound to batch_size=starting_batch_size."""
    wrapped = find_executable_batch_size(lambda batch_size, x: (batch_size, x), 16)
    assert wrapped(x=1) == (16, 1)


def test_find_executable_batch_size_as_decorator():
    """Called without a function it returns a decorator."""

    @find_executable_batch_size(starting_batch_size=8, auto_find_batch_size=True)
    def train(batch_size):
        if batch_size > 2:
            raise torch.OutOfMemoryError("out of memory")
        return batch_size

    assert train() == 2


# --- Memory tracker ---


def train(tracker, metrics):
    """Stands in for Trainer.train: the tracker names the stage after this function."""
    tracker.start()
    _ = bytearray(8 * 2**20)
    tracker.stop_and_update_metrics(metrics)


def test_memory_tracker_reports_stage_metrics():
    """The first report carries init and train CPU deltas and the memory before init."""
    tracker, metrics = TrainerMemoryTracker(skip_memory_metrics=False), {}
    tracker.start(stage="init")
    tracker.stop_and_update_metrics(stage="init")
    train(tracker, metrics)
    expected = {"init_mem_cpu_alloc_delta", "init_mem_cpu_peaked_delta", "before_init_mem_cpu"}
    expected |= {"train_mem_cpu_alloc_delta", "train_mem_cpu_peaked_delta"}
    if torch.cuda.is_available():
        expected |= {k.replace("cpu", "gpu") for k in expected}
    assert set(metrics) == expected
    assert metrics["before_init_mem_cpu"] > 0 and metrics["train_mem_cpu_peaked_delta"] >= 0


def test_memory_tracker_ignores_nested_stage():
    """A stage started while another runs (eval during train) is ignored."""
    tracker, metrics = TrainerMemoryTracker(skip_memory_metrics=False), {}
    tracker.init_reported = True
    tracker.start(stage="train")
    tracker.start(stage="eval")
    tracker.stop_and_update_metrics(metrics, stage="eval")
    assert metrics == {} and tracker.cur_stage == "train"
    tracker.stop_and_update_metrics(metrics, stage="train")
    assert set(metrics) == {"train_mem_cpu_alloc_delta", "train_mem_cpu_peaked_delta"}


def test_memory_tracker_skip_reports_nothing():
    """skip_memory_metrics=True measures and reports nothing."""
    tracker, metrics = TrainerMemoryTracker(skip_memory_metrics=True), {}
    train(tracker, metrics)
    assert metrics == {}


def test_memory_tracker_rejects_unknown_caller():
    """Called from a method that is no Trainer stage, it raises ValueError listing the stages."""
    with pytest.raises(ValueError, match="evaluate"):
        TrainerMemoryTracker(skip_memory_metrics=False).start()


def test_memory_reader_works_without_psutil(monkeypatch):
    """Without psutil the resident set size still comes from /proc or the resource module."""
    monkeypatch.setitem(sys.modules, "psutil", None)
    assert trainer_utils_memory._rss_reader()() > 0
