"""Property: whatever damage the two newest checkpoints take, resume_from_checkpoint=True either continues
from the newest intact one and ends with the weights of the uninterrupted run, or raises CheckpointError
naming a file; never another exception, never other weights.

One damage cannot be seen and is left out: a checkpoint that lost both its checksum manifest and its
``training_args.json`` looks like an intact folder written by transformers (which has neither), so a flipped
bit in its tensors goes unnoticed. Losing the manifest alone marks the checkpoint as damaged."""

from __future__ import annotations

import logging
import os
import shutil
import tempfile

import pytest
import torch
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st
from torch import nn

import hf_lightning
from hf_lightning.checkpoint import CheckpointError
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
