"""Property: whatever damage the two newest checkpoints take, resume_from_checkpoint=True either continues
from the newest intact one and ends with the weights of the uninterrupted run, or raises CheckpointError
naming a file; never another exception, never other weights.

One damage cannot be seen and is left out: a checkpoint that lost both its checksum manifest and its
``training_args.json`` looks like an intact folder written by transformers (which has neither), so a flipped
bit in its tensors goes unnoticed. Losing the manifest alone marks the checkpoint as damaged."""

from __future__ import annotations

import errno
import logging
import os
import pathlib
import shutil
import subprocess
import tempfile

import pytest
import torch
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st
from torch import nn

import hf_lightning
from hf_lightning.checkpoint import CheckpointError
from hf_lightning.checkpoint.io import DiskFullError
from tests.tiny import regression_data

ARGS = dict(
    report_to="none",
    use_cpu=True,
    disable_tqdm=True,
    seed=0,
    per_device_train_batch_size=4,
    learning_rate=0.1,
    logging_steps=1,
    max_steps=6,
    save_steps=2,
)
DAMAGED = ("checkpoint-4", "checkpoint-6")  # the two newest; checkpoint-2 stays intact


class WideRegression(nn.Module):
    """y = MLP(x) with 2 x 128 hidden units and dropout: most bytes of each file are tensor data."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = nn.Sequential(nn.Linear(1, 128), nn.Tanh(), nn.Dropout(0.1), nn.Linear(128, 1))

    def forward(self, input_x: torch.Tensor, labels: torch.Tensor | None = None):
        y = self.net(input_x.reshape(-1, 1)).reshape(-1)
        return (nn.functional.mse_loss(y, labels), y)


def _trainer(output_dir: str) -> hf_lightning.Trainer:
    return hf_lightning.Trainer(
        model=WideRegression(),  # dropout: the restored RNG state matters
        args=hf_lightning.TrainingArguments(output_dir=output_dir, **ARGS),
        train_dataset=regression_data(16),  # 4 steps per epoch: checkpoints 2 and 6 are mid-epoch
    )


@pytest.fixture(scope="module")
def uninterrupted():
    """One run of 6 steps saving every 2 steps: (its output folder, its final weights)."""
    with tempfile.TemporaryDirectory() as root:
        trainer = _trainer(os.path.join(root, "out"))
        trainer.train()
        weights = {k: v.detach().clone() for k, v in trainer.model.state_dict().items()}
        yield os.path.join(root, "out"), weights


class _Skipped(logging.Handler):
    """Collects the checkpoints that resume_from_checkpoint=True passed over."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.folders: set[str] = set()

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if message.startswith("Skipping checkpoint `"):
            self.folders.add(os.path.basename(message.split("`")[1]))


def _damage(folder: str, kind: str, pick: int, where: float, bit: int) -> str | None:
    """Damage one file; the name of a deleted one."""
    files = sorted(os.listdir(folder))
    path = os.path.join(folder, files[pick % len(files)])
    if kind == "delete":
        os.remove(path)
        return os.path.basename(path)
    size = os.path.getsize(path)
    if size == 0:
        return
    offset = min(int(where * size), size - 1)
    with open(path, "r+b") as handle:
        if kind == "truncate":
            handle.truncate(offset)
        else:
            handle.seek(offset)
            byte = handle.read(1)[0]
            handle.seek(offset)
            handle.write(bytes([byte ^ (1 << bit)]))
    return None


UNSEEN = {"checkpoint-manifest.json", "training_args.json"}  # both gone: a transformers-like folder


DAMAGE = st.tuples(
    st.sampled_from(DAMAGED),
    st.integers(0, 63),
    st.sampled_from(["truncate", "flip", "delete"]),
    st.floats(0.0, 1.0),
    st.integers(0, 7),
)


@settings(max_examples=20, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@example(
    damages=[
        ("checkpoint-4", 0, "delete", 0.0, 0),
        ("checkpoint-4", 1, "delete", 0.0, 0),
        ("checkpoint-6", 0, "truncate", 0.0, 0),
    ]
)
@example(
    damages=[("checkpoint-6", 0, "delete", 0.0, 0), ("checkpoint-6", 0, "flip", 1.0, 0)]
)  # manifest gone
@given(damages=st.lists(DAMAGE, min_size=1, max_size=3))
def test_resume_after_damage_reaches_the_uninterrupted_weights_or_names_a_file(uninterrupted, damages):
    """Random truncations, bit flips and deletions in checkpoints 4 and 6: same final weights, or CheckpointError."""
    source, expected = uninterrupted
    with tempfile.TemporaryDirectory() as root:
        out = os.path.join(root, "out")
        shutil.copytree(source, out)
        deleted: dict[str, set[str]] = {}
        for checkpoint, pick, kind, where, bit in damages:
            name = _damage(os.path.join(out, checkpoint), kind, pick, where, bit)
            deleted.setdefault(checkpoint, set()).update([name] if name else [])
        assume(not any(UNSEEN <= names for names in deleted.values()))
        damaged = {checkpoint for checkpoint, *_ in damages}
        skipped = _Skipped()
        logging.getLogger("hf_lightning").addHandler(skipped)
        trainer = _trainer(out)
        try:
            trainer.train(resume_from_checkpoint=True)
        except CheckpointError as exc:
            assert exc.path and os.path.exists(os.path.dirname(exc.path)), str(exc)
            assert "checkpoint-" in str(exc)
            return
        finally:
            logging.getLogger("hf_lightning").removeHandler(skipped)
        assert skipped.folders <= damaged  # an intact checkpoint is never passed over
        for name, tensor in trainer.model.state_dict().items():
            assert torch.equal(tensor, expected[name]), name


# --- a flipped byte in the best checkpoint ------------------------------------------------------------------
def _best_run(lib, output_dir: str, flip: tuple[str, ...], limit: int | None):
    """Evaluate and save every 2 of 6 steps; the scores make checkpoint-2 the best; ``flip`` lists the
    checkpoints whose model.safetensors gets one flipped bit in its last tensor byte once checkpoint-6 is written."""

    class Flip(lib.TrainerCallback):
        def on_save(self, args, state, control, **kwargs):
            if state.global_step == 6:
                for name in flip:
                    with open(os.path.join(output_dir, name, "model.safetensors"), "r+b") as handle:
                        handle.seek(-1, os.SEEK_END)
                        byte = handle.read(1)[0]
                        handle.seek(-1, os.SEEK_END)
                        handle.write(bytes([byte ^ 0x10]))

    scores = iter([0.9, 0.1, 0.2])
    args = lib.TrainingArguments(output_dir=output_dir, **ARGS, eval_strategy="steps", eval_steps=2,
                                 metric_for_best_model="score", greater_is_better=True,
                                 load_best_model_at_end=True, save_total_limit=limit)  # fmt: skip
    return lib.Trainer(model=WideRegression(), args=args, train_dataset=regression_data(16),
                       eval_dataset=regression_data(4), compute_metrics=lambda p: {"score": next(scores)},
                       callbacks=[Flip()])  # fmt: skip


def _weights_in(folder: str) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(os.path.join(folder, "model.safetensors"))


def test_flipped_byte_in_best_checkpoint_is_never_loaded_silently(tmp_path, caplog):
    """load_best_model_at_end with a damaged best: a warning naming the file, the newest intact checkpoint is
    loaded instead, and save_total_limit=1 deletes nothing. transformers loads the flipped weights."""
    import transformers

    theirs = _best_run(transformers, str(tmp_path / "hf"), flip=("checkpoint-2",), limit=None)
    theirs.train()
    damaged = _weights_in(str(tmp_path / "hf" / "checkpoint-2"))
    for name, tensor in theirs.model.state_dict().items():  # parity: transformers returns the damaged weights
        assert torch.equal(tensor, damaged[name]), name
    out = tmp_path / "out"
    ours = _best_run(hf_lightning, str(out), flip=("checkpoint-2",), limit=1)
    with caplog.at_level(logging.WARNING):
        ours.train()
    assert ours.state.best_model_checkpoint == str(out / "checkpoint-2")
    assert f"`{out / 'checkpoint-2' / 'model.safetensors'}` is corrupt" in caplog.text
    assert f"loading the newest intact checkpoint `{out / 'checkpoint-6'}`" in caplog.text
    newest = _weights_in(str(out / "checkpoint-6"))
    for name, tensor in ours.model.state_dict().items():
        assert torch.equal(tensor, newest[name]), name
    assert sorted(os.listdir(out)) == ["checkpoint-2", "checkpoint-6"]  # not pruned to the damaged best


def test_load_best_refuses_when_no_checkpoint_is_intact(tmp_path):
    """Every checkpoint damaged: CheckpointError naming the best's damaged file (the model keeps its weights)."""
    out = tmp_path / "out"
    trainer = _best_run(
        hf_lightning, str(out), flip=("checkpoint-2", "checkpoint-4", "checkpoint-6"), limit=None
    )
    with pytest.raises(CheckpointError, match="no other checkpoint beside it is intact") as caught:
        trainer.train()
    assert caught.value.path == str(out / "checkpoint-2" / "model.safetensors")


# --- a full disk --------------------------------------------------------------------------------------------
@pytest.fixture
def small_disk(tmp_path):
    """A tmpfs of 2 MiB mounted at tmp_path/disk (root only), unmounted afterwards."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        pytest.skip("mounting a tmpfs for the full-disk test needs root")
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(disk)], capture_output=True, text=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs for the full-disk test: {mounted.stderr.strip()}")
    yield disk
    subprocess.run(["umount", "-l", str(disk)], check=False)


def _checkpoint_bytes(folder) -> int:
    """What the folder takes on a disk: whole pages (tmpfs) for each file, its directory entry."""
    return sum(-(-f.stat().st_size // 4096) * 4096 for f in folder.rglob("*") if f.is_file()) + 4096


def test_full_disk_during_a_save_names_the_folder_and_resume_ends_as_uninterrupted(uninterrupted, small_disk):
    """The disk fills during the save of checkpoint-4: DiskFullError (an OSError, ENOSPC) naming that folder
    and saying the disk is full; nothing of it stays on disk. Freed space, resume=True ends bit-identical.
    transformers fails with torch's "unexpected pos", safetensors' or the OS's error, naming no folder."""
    source, expected = uninterrupted
    size = _checkpoint_bytes(pathlib.Path(source) / "checkpoint-2")
    filler = small_disk / "filler"
    free = shutil.disk_usage(small_disk).free
    filler.write_bytes(b"\0" * (free - int(1.5 * size)))  # room for checkpoint-2, not for checkpoint-4
    out = small_disk / "out"
    with pytest.raises(
        DiskFullError, match=rf"The disk is full: writing checkpoint `{out / 'checkpoint-4'}`"
    ) as caught:
        _trainer(str(out)).train()
    assert caught.value.errno == errno.ENOSPC and caught.value.folder == str(out / "checkpoint-4")
    assert sorted(os.listdir(out)) == ["checkpoint-2"]  # no .tmp-checkpoint-4 holding the space
    filler.unlink()
    resumed = _trainer(str(out))
    resumed.train(resume_from_checkpoint=True)
    for name, tensor in resumed.model.state_dict().items():
        assert torch.equal(tensor, expected[name]), name
