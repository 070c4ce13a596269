"""Crash safety beyond transformers: a training process killed while saving leaves no broken checkpoint-N,
resuming skips incomplete folders and says so, and damaged or unsafe files are refused by name."""

from __future__ import annotations

import contextlib
import itertools
import os
import pathlib
import signal
import subprocess
import sys
import textwrap

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import hf_lightning
from hf_lightning.checkpoint import (
    INCOMPLETE_SENTINEL_NAME,
    CheckpointError,
    is_checkpoint_complete,
    load_model_weights,
)
from hf_lightning.checkpoint.io import safe_torch_load
from hf_lightning.trainer_utils import get_last_checkpoint
from tests.tiny import RegressionModel, StopAt, regression_data

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def make_trainer(output_dir: str, callbacks=None, processing_class=None, **kwargs) -> hf_lightning.Trainer:
    """Regression with dropout, 2 x GA 2, a checkpoint after every step, 6 steps."""
    args = hf_lightning.TrainingArguments(
        **{
            "output_dir": output_dir,
            "report_to": "none",
            "use_cpu": True,
            "disable_tqdm": True,
            "seed": 0,
            "max_steps": 6,
            "per_device_train_batch_size": 2,
            "gradient_accumulation_steps": 2,
            "learning_rate": 0.05,
            "logging_steps": 1,
            "save_steps": 1,
            **kwargs,
        }
    )
    return hf_lightning.Trainer(
        model=RegressionModel(dropout=0.2),
        args=args,
        train_dataset=regression_data(20),
        callbacks=callbacks,
        processing_class=processing_class,
    )


CHILD = """
import os, signal, sys
import torch
torch.set_num_threads(1)
sys.path.insert(0, {root!r})
from tests.checkpoint.test_crash_safety import make_trainer

class KillDuringThirdSave:
    calls = 0
    def save_pretrained(self, folder):  # runs inside the save, after the weights were written
        KillDuringThirdSave.calls += 1
        if KillDuringThirdSave.calls == 3:
            os.kill(os.getpid(), signal.SIGKILL)

make_trainer({out!r}, processing_class=KillDuringThirdSave()).train()
"""


@pytest.fixture(scope="module")
def killed(tmp_path_factory):
    """A training process SIGKILLed in the middle of writing checkpoint-3."""
    base = tmp_path_factory.mktemp("killed")
    script = base / "child.py"
    script.write_text(textwrap.dedent(CHILD.format(root=ROOT, out=str(base / "out"))))
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=300, cwd=ROOT
    )
    return base / "out", done


def test_sigkill_during_a_save_leaves_only_complete_checkpoints(killed):
    """After SIGKILL mid-save, every checkpoint-N present loads; the interrupted one exists only as staging."""
    out, done = killed
    assert done.returncode == -signal.SIGKILL, done.stderr[-3000:]
    names = sorted(os.listdir(out))
    assert [n for n in names if n.startswith("checkpoint-")] == ["checkpoint-1", "checkpoint-2"]
    assert os.path.isfile(out / ".tmp-checkpoint-3" / INCOMPLETE_SENTINEL_NAME)
    for name in ("checkpoint-1", "checkpoint-2"):
        assert is_checkpoint_complete(out / name)
        model = RegressionModel()
        load_model_weights(model, out / name)
        for file in ("optimizer.pt", "scheduler.pt", "rng_state.pth"):
            assert isinstance(safe_torch_load(str(out / name / file), allow_numpy=True), dict)


def test_auto_resume_after_the_crash_matches_uninterrupted_training(killed, tmp_path):
    """resume_from_checkpoint=True picks the newest complete checkpoint and ends where a straight run does."""
    out, _ = killed
    assert get_last_checkpoint(str(out)) == str(out / "checkpoint-2")
    resumed = make_trainer(str(out))
    resumed.train(resume_from_checkpoint=True)
    straight = make_trainer(str(tmp_path / "straight"), save_strategy="no")
    straight.train()
    for name, value in straight.model.state_dict().items():
        torch.testing.assert_close(resumed.model.state_dict()[name], value, rtol=0, atol=0)


@pytest.fixture
def saved(tmp_path):
    """output_dir with checkpoint-2 and checkpoint-3 from a run stopped after step 3."""
    make_trainer(str(tmp_path), callbacks=[StopAt(3)]).train()
    return tmp_path


def test_resume_true_skips_a_folder_with_the_sentinel_and_says_so(saved, caplog):
    """A checkpoint-N still holding checkpoint-is-incomplete.txt is skipped by resume=True, with a warning."""
    (saved / "checkpoint-3" / INCOMPLETE_SENTINEL_NAME).write_text("interrupted")
    trainer = make_trainer(str(saved), max_steps=4)
    with caplog.at_level("WARNING"):
        trainer.train(resume_from_checkpoint=True)
    assert "checkpoint-3" in caplog.text and INCOMPLETE_SENTINEL_NAME in caplog.text
    assert [h["step"] for h in trainer.state.log_history if "loss" in h] == [1, 2, 3, 4]


def _break(folder: pathlib.Path, kind: str) -> str:
    if kind == "sentinel":
        (folder / INCOMPLETE_SENTINEL_NAME).write_text("interrupted")
        return INCOMPLETE_SENTINEL_NAME
    if kind == "no weights":
        (folder / "model.safetensors").unlink()
        return "no model weights"
    if kind == "no state":
        (folder / "trainer_state.json").unlink()
        return "trainer_state.json"
    if kind == "not a folder":
        return "not a folder"
    data = (folder / "optimizer.pt").read_bytes()
    (folder / "optimizer.pt").write_bytes(data[: len(data) // 2])
    return "optimizer.pt.*truncated or corrupt"


@pytest.mark.parametrize(
    "kind", ["sentinel", "no weights", "no state", "not a folder", "truncated optimizer"]
)
def test_explicit_resume_from_a_broken_folder_names_the_problem(saved, kind):
    """resume_from_checkpoint=<broken folder> raises a CheckpointError saying what is wrong with it."""
    folder = saved / "checkpoint-2" if kind != "not a folder" else saved / "checkpoint-9"
    expected = _break(folder, kind)
    with pytest.raises(CheckpointError, match=expected):
        make_trainer(str(saved)).train(resume_from_checkpoint=str(folder))


class RunsCode:
    """Pickles to a call that creates a file when unpickled."""

    def __init__(self, marker: pathlib.Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (pathlib.Path.touch, (self.marker,))


@pytest.mark.parametrize("name", ["optimizer.pt", "scheduler.pt", "rng_state.pth"])
def test_a_pickle_that_would_run_code_is_refused(saved, name):
    """A checkpoint file whose unpickling would run code is refused by name, and the code never runs."""
    marker = saved / "pwned"
    torch.save({"state": RunsCode(marker)}, saved / "checkpoint-2" / name)
    with pytest.raises(CheckpointError, match=f"Refused to load .*{name}"):
        make_trainer(str(saved)).train(resume_from_checkpoint=str(saved / "checkpoint-2"))
    assert not marker.exists()


# --- a kill at any file operation of a save or a rotation -------------------------------------------------
@pytest.fixture(scope="module", params=["durable", "deferred"])
def kill_points(request, tmp_path_factory):
    """(number of file operations in output_dir of an uninterrupted run, its final weights, whether the saves
    defer their flush: ``HF_LIGHTNING_DEFERRED_DURABILITY=1``)."""
    from tests.checkpoint._kill_points import killed_run

    deferred = request.param == "deferred"
    base = tmp_path_factory.mktemp("kill-points")
    assert killed_run(str(base / "out"), 0, "before", str(base / "count"), deferred) == 0
    straight = make_trainer(str(base / "straight"), save_strategy="no")
    straight.train()
    weights = {k: v.clone() for k, v in straight.model.state_dict().items()}
    return int((base / "count").read_text()), weights, deferred


def _temporary(path: str) -> bool:
    """A name hf_lightning writes only while a save, rotation or training runs (checkpoint/leftovers.py)."""
    return any(
        part.startswith((".tmp-", ".old-", ".trash-", ".rotated-", ".hf-lightning")) or ".tmp-" in part
        for part in path.split("/")
    )


class _LeftoversAtStart(hf_lightning.TrainerCallback):
    def __init__(self, out: str) -> None:
        self.out, self.found = out, None

    def on_train_begin(self, args, state, control, **kwargs):
        from hf_lightning.checkpoint.leftovers import find_leftovers

        self.found = find_leftovers(self.out)


def _kill_and_restart(kill_points, hub_server, kill_at: int, when: str) -> None:
    """SIGKILL at file operation ``kill_at``, push the folder as it is, restart with resume=True: no
    temporary survives the start, the weights are those of the uninterrupted run, the Hub holds only
    complete checkpoints. With deferred durability the restart defers its flushes too."""
    import tempfile

    from hf_lightning.checkpoint.folders import resume_problem
    from hf_lightning.checkpoint.leftovers import find_leftovers
    from tests.checkpoint._kill_points import killed_run
    from tests.hub_server import TOKEN, USER

    _, expected, deferred = kill_points
    with tempfile.TemporaryDirectory() as root, _deferred_durability(deferred):
        out = os.path.join(root, "out")
        assert killed_run(out, kill_at, when, os.path.join(root, "count"), deferred) == -signal.SIGKILL
        repo = f"{USER}/kill-{next(_REPOS)}"
        look = _LeftoversAtStart(out)
        trainer = make_trainer(out, callbacks=[look], save_total_limit=2, push_to_hub=True, hub_token=TOKEN,
                               hub_model_id=repo, hub_strategy="all_checkpoints")  # fmt: skip
        trainer.push_to_hub(blocking=True)  # what a push uploads from the folder the kill left
        pushed = hub_server.files(repo)
        assert not [path for path in pushed if _temporary(path) or path.startswith("checkpoint-")], pushed
        resume = get_last_checkpoint(out) is not None
        trainer.train(resume_from_checkpoint=True if resume else None)
        assert find_leftovers(out) == []  # none survives the restart
        if look.found is None:  # resumed at max_steps: train() returned without a step (nor on_train_begin)
            assert resume and trainer.state.global_step == 6
        else:
            assert look.found == []  # removed before the first step
        for name, value in expected.items():
            torch.testing.assert_close(trainer.model.state_dict()[name], value, rtol=0, atol=0)
        pushed = hub_server.files(repo)
        assert not [path for path in pushed if _temporary(path)], pushed
        snapshot = hub_server.snapshot(repo, hub_server.resolve(repo, "main"))
        for folder in {path.split("/")[0] for path in pushed if path.startswith("checkpoint-")}:
            assert resume_problem(snapshot / folder) is None, folder  # every pushed checkpoint is whole


@contextlib.contextmanager
def _deferred_durability(on: bool):
    """``HF_LIGHTNING_DEFERRED_DURABILITY=1`` (``on``) or ``0`` while the block runs (a hypothesis example
    cannot take the function-scoped ``monkeypatch``)."""
    name = "HF_LIGHTNING_DEFERRED_DURABILITY"
    before = os.environ.get(name)
    os.environ[name] = "1" if on else "0"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = before


KILL = dict(deadline=None, database=None, suppress_health_check=list(HealthCheck))
_REPOS = itertools.count()


@settings(max_examples=3, **KILL)
@given(data=st.data())
def test_kill_at_a_random_file_operation_then_restart(kill_points, hub_server, data):
    """Property (few examples here, many under slow): see ``_kill_and_restart``."""
    total = kill_points[0]
    kill_at = data.draw(st.integers(1, total), label="kill_at")
    _kill_and_restart(kill_points, hub_server, kill_at, data.draw(st.sampled_from(["before", "after"])))


@pytest.mark.slow
@settings(max_examples=40, **KILL)
@given(data=st.data())
def test_kill_at_a_random_file_operation_then_restart_many(kill_points, hub_server, data):
    """The property over 40 kill points."""
    total = kill_points[0]
    kill_at = data.draw(st.integers(1, total), label="kill_at")
    _kill_and_restart(kill_points, hub_server, kill_at, data.draw(st.sampled_from(["before", "after"])))
