"""Checkpoint folders interchange with transformers.Trainer, and rotation deletes what transformers deletes."""

from __future__ import annotations

import os
import random
import shutil

import numpy as np
import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainerState, TrainingArguments
from transformers.trainer_utils import get_last_checkpoint, sort_checkpoints
from transformers.trainer_utils import rotate_checkpoints as hf_rotate_checkpoints

from hf_lightning.checkpoint import (
    CheckpointError,
    load_model_weights,
    load_optimizer_and_scheduler,
    load_rng_state,
    load_training_args,
    rotate_checkpoints,
    save_checkpoint,
    sorted_checkpoints,
    staging_path,
)

OUR_ADDITIONS = {"training_args.json", "checkpoint-manifest.json"}  # docs/checkpointing.md


def tiny_gpt2(seed: int) -> GPT2LMHeadModel:
    torch.manual_seed(seed)
    return GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=64, n_head=2, vocab_size=256))


class RandomTokens(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return 8

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        ids = torch.randint(0, 256, (8,), generator=torch.Generator().manual_seed(index))
        return {"input_ids": ids, "labels": ids}


def hf_args(output_dir) -> TrainingArguments:
    return TrainingArguments(
        output_dir=str(output_dir), use_cpu=True, report_to="none", save_steps=2, max_steps=2,
        per_device_train_batch_size=2, disable_tqdm=True,
    )  # fmt: skip


def decay_groups(model: torch.nn.Module, args: TrainingArguments) -> list[dict]:
    """The two parameter groups transformers' default AdamW uses (decay / no decay)."""
    decay = set(Trainer(model=model, args=args).get_decay_parameter_names(model))
    named = list(model.named_parameters())
    return [
        {"params": [p for n, p in named if n in decay], "weight_decay": args.weight_decay},
        {"params": [p for n, p in named if n not in decay], "weight_decay": 0.0},
    ]


@pytest.fixture(scope="module")
def hf_run(tmp_path_factory):
    """A real transformers.Trainer run of 2 steps that saved checkpoint-2."""
    output_dir = tmp_path_factory.mktemp("hf_run")
    trainer = Trainer(model=tiny_gpt2(0), args=hf_args(output_dir), train_dataset=RandomTokens())
    trainer.train()
    return trainer, str(output_dir / "checkpoint-2")


@pytest.fixture(scope="module")
def our_checkpoint(tmp_path_factory):
    """A checkpoint-2 written by save_checkpoint after 2 manual steps with transformers' optimizer."""
    output_dir = tmp_path_factory.mktemp("ours")
    model = tiny_gpt2(0)
    trainer = Trainer(model=model, args=hf_args(output_dir))
    trainer.create_optimizer_and_scheduler(num_training_steps=2)
    for index in range(2):
        batch = {key: value.unsqueeze(0) for key, value in RandomTokens()[index].items()}
        model(**batch).loss.backward()
        trainer.optimizer.step()
        trainer.lr_scheduler.step()
        trainer.optimizer.zero_grad()
    state = TrainerState(global_step=2, max_steps=2)
    folder = save_checkpoint(
        output_dir, 2, model=model, optimizer=trainer.optimizer, scheduler=trainer.lr_scheduler, state=state,
        args=trainer.args,
    )  # fmt: skip
    after_save = (random.random(), float(np.random.rand()), torch.rand(3))
    return trainer, folder, after_save


# --- transformers writes, we read -----------------------------------------------------------------------


def test_our_weight_loader_reads_transformers_checkpoint(hf_run):
    """load_model_weights(strict=True) restores transformers' GPT-2 weights (tied lm_head included)."""
    trainer, folder = hf_run
    fresh = tiny_gpt2(1)
    load_model_weights(fresh, folder, strict=True)
    torch.testing.assert_close(fresh.state_dict(), trainer.model.state_dict(), rtol=0, atol=0)


def test_our_optimizer_loader_reads_transformers_checkpoint(hf_run):
    """load_optimizer_and_scheduler restores transformers' AdamW and LambdaLR states."""
    trainer, folder = hf_run
    fresh = tiny_gpt2(1)
    optimizer = torch.optim.AdamW(decay_groups(fresh, trainer.args), lr=trainer.args.learning_rate)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
    assert load_optimizer_and_scheduler(folder, optimizer, scheduler) == ["optimizer.pt", "scheduler.pt"]
    torch.testing.assert_close(optimizer.state_dict(), trainer.optimizer.state_dict(), rtol=0, atol=0)
    assert scheduler.last_epoch == 2 and scheduler.get_last_lr() == trainer.lr_scheduler.get_last_lr()


def test_our_rng_loader_reads_transformers_checkpoint(hf_run):
    """load_rng_state restores the python, numpy and torch generators transformers saved."""
    _, folder = hf_run
    saved = torch.load(os.path.join(folder, "rng_state.pth"), weights_only=False)  # our own trusted file
    random.seed(5), np.random.seed(5), torch.manual_seed(5)
    assert load_rng_state(folder) is True
    assert random.getstate() == saved["python"]
    assert np.array_equal(np.random.get_state()[1], saved["numpy"][1])
    assert torch.equal(torch.random.get_rng_state(), saved["cpu"])


def test_transformers_training_args_bin_is_refused_not_unpickled(hf_run):
    """transformers pickles TrainingArguments into training_args.bin; load_training_args refuses it."""
    _, folder = hf_run
    with pytest.raises(CheckpointError, match="Refused to load .*training_args.bin"):
        load_training_args(folder)


# --- we write, transformers reads -----------------------------------------------------------------------


def test_our_folder_has_the_file_names_transformers_writes(hf_run, our_checkpoint):
    """Our checkpoint-2 holds exactly transformers' file names plus training_args.json and checkpoint-manifest.json."""
    _, theirs = hf_run
    _, ours, _ = our_checkpoint
    assert set(os.listdir(ours)) - OUR_ADDITIONS == set(os.listdir(theirs))


def test_our_training_args_bin_loads_without_unpickling_objects(our_checkpoint):
    """Our training_args.bin is a plain dict of transformers' TrainingArguments.to_dict()."""
    trainer, folder, _ = our_checkpoint
    loaded = torch.load(os.path.join(folder, "training_args.bin"), weights_only=True)
    assert loaded["output_dir"] == trainer.args.output_dir and loaded["save_strategy"] == "steps"
    assert load_training_args(folder)["max_steps"] == 2


def test_transformers_loads_our_weights(our_checkpoint):
    """Trainer._load_from_checkpoint reads our model files."""
    trainer, folder, _ = our_checkpoint
    fresh = tiny_gpt2(1)
    Trainer(model=fresh, args=trainer.args)._load_from_checkpoint(folder)
    torch.testing.assert_close(fresh.state_dict(), trainer.model.state_dict(), rtol=0, atol=0)


def test_transformers_loads_our_optimizer_and_scheduler(our_checkpoint):
    """Trainer._load_optimizer_and_scheduler reads our optimizer.pt and scheduler.pt."""
    trainer, folder, _ = our_checkpoint
    other = Trainer(model=tiny_gpt2(1), args=trainer.args)
    other.create_optimizer_and_scheduler(num_training_steps=2)
    other._load_optimizer_and_scheduler(folder)
    torch.testing.assert_close(other.optimizer.state_dict(), trainer.optimizer.state_dict(), rtol=0, atol=0)
    assert other.lr_scheduler.state_dict()["last_epoch"] == 2
    assert other.lr_scheduler.get_last_lr() == trainer.lr_scheduler.get_last_lr()


def test_transformers_loads_our_rng_state(our_checkpoint):
    """Trainer._load_rng_state restores the generators as they were when we saved."""
    trainer, folder, after_save = our_checkpoint
    random.seed(9), np.random.seed(9), torch.manual_seed(9)
    Trainer(model=tiny_gpt2(1), args=trainer.args)._load_rng_state(folder)
    drawn = (random.random(), float(np.random.rand()), torch.rand(3))
    torch.testing.assert_close(drawn, after_save, rtol=0, atol=0)


def test_transformers_reads_our_trainer_state(our_checkpoint):
    """TrainerState.load_from_json reads the trainer_state.json in our folder."""
    _, folder, _ = our_checkpoint
    assert TrainerState.load_from_json(os.path.join(folder, "trainer_state.json")).global_step == 2


def test_transformers_last_checkpoint_ignores_our_staging_folder(tmp_path, our_checkpoint):
    """An interrupted save's .tmp-checkpoint-N is invisible to transformers' get_last_checkpoint."""
    _, folder, _ = our_checkpoint
    shutil.copytree(folder, tmp_path / "checkpoint-2")
    os.makedirs(staging_path(tmp_path, 3))
    assert get_last_checkpoint(str(tmp_path)) == str(tmp_path / "checkpoint-2")


# --- rotation: the same folders deleted for the same inputs ----------------------------------------------

ROTATION_CASES = [
    # (existing steps, save_total_limit, best step or None)
    ([1, 2, 3, 4, 5], None, None),
    ([1, 2, 3, 4, 5], 0, None),
    ([1, 2, 3, 4, 5], 2, None),
    ([1, 2, 3, 4, 5], 5, None),
    ([1, 2, 3, 4, 5], 1, None),
    ([1, 2, 3, 4, 5], 1, 3),
    ([1, 2, 3, 4, 5], 1, 5),
    ([1, 2, 3, 4, 5], 2, 1),
    ([1, 2, 3, 4, 5], 3, 2),
    ([9, 10, 100, 11], 2, None),
    ([9, 10, 100, 11], 2, 9),
    ([1, 2], 1, 7),
]


def make_dirs(root, steps) -> None:
    for step in steps:
        (root / f"checkpoint-{step}").mkdir(parents=True)


def remaining(root) -> list[str]:
    return sorted(os.listdir(root))


@pytest.mark.parametrize(("steps", "limit", "best"), ROTATION_CASES)
def test_rotation_deletes_what_transformers_deletes(tmp_path, steps, limit, best):
    """rotate_checkpoints leaves the same folders as transformers' rotate_checkpoints (numeric order)."""
    theirs, ours = tmp_path / "theirs", tmp_path / "ours"
    for root in (theirs, ours):
        make_dirs(root, steps)
    best_of = {root: None if best is None else str(root / f"checkpoint-{best}") for root in (theirs, ours)}
    hf_rotate_checkpoints(str(theirs), limit, best_model_checkpoint=best_of[theirs], use_mtime=False)
    rotate_checkpoints(ours, limit, best_model_checkpoint=best_of[ours])
    assert remaining(ours) == remaining(theirs)


@pytest.mark.parametrize(
    ("steps", "best"), [([1, 2, 3], 1), ([1, 2, 3], 3), ([9, 10, 100], 9), ([1, 2], None)]
)
def test_sorted_checkpoints_orders_like_transformers(tmp_path, steps, best):
    """sorted_checkpoints gives transformers' sort_checkpoints order, best checkpoint moved alike."""
    make_dirs(tmp_path, steps)
    best_path = None if best is None else str(tmp_path / f"checkpoint-{best}")
    expected = sort_checkpoints(str(tmp_path), best_model_checkpoint=best_path)
    assert sorted_checkpoints(tmp_path, best_path) == expected


def hf_train_end_prune(output_dir: str, save_total_limit: int | None, best: str | None) -> None:
    """The pass transformers' Trainer.train makes after training (trainer.py, after _load_best_model)."""
    checkpoints = sort_checkpoints(output_dir=output_dir, best_model_checkpoint=best)
    if best is not None and save_total_limit == 1:
        for checkpoint in checkpoints:
            if not os.path.samefile(checkpoint, best):
                shutil.rmtree(checkpoint, ignore_errors=True)


@pytest.mark.parametrize(("limit", "best"), [(1, 2), (1, 3), (2, 2), (1, None), (None, 2)])
def test_train_end_prune_matches_transformers(tmp_path, limit, best):
    """rotate_checkpoints(at_train_end=True) keeps only the best when save_total_limit=1, as transformers."""
    theirs, ours = tmp_path / "theirs", tmp_path / "ours"
    for root in (theirs, ours):
        make_dirs(root, [1, 2, 3])
    best_of = {root: None if best is None else str(root / f"checkpoint-{best}") for root in (theirs, ours)}
    hf_train_end_prune(str(theirs), limit, best_of[theirs])
    rotate_checkpoints(ours, limit, best_model_checkpoint=best_of[ours], at_train_end=True)
    assert remaining(ours) == remaining(theirs)
