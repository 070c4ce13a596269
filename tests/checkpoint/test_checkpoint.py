"""The HF checkpoint folder format: round trips, crash safety, safe loading, discovery and rotation."""

from __future__ import annotations

import json
import logging
import os
import random
import shlex
import signal
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
import safetensors.torch
import torch
from torch import nn

from hf_lightning.checkpoint import (
    INCOMPLETE_SENTINEL_NAME,
    CheckpointError,
    capture_rng_state,
    checkpoint_path,
    find_resumable_checkpoint,
    is_checkpoint_complete,
    load_model_weights,
    load_optimizer_and_scheduler,
    load_rng_state,
    load_training_args,
    rotate_checkpoints,
    save_checkpoint,
    save_model,
    sorted_checkpoints,
    staging_path,
    write_rank_files,
)
from hf_lightning.checkpoint.durability import wait_for_durability


class TinyTied(nn.Module):
    """An embedding whose output head shares the embedding matrix (like GPT-2's lm_head)."""

    def __init__(self, vocab: int = 16, width: int = 8) -> None:
        super().__init__()
        self.emb = nn.Embedding(vocab, width)
        self.body = nn.Linear(width, width)
        self.head = nn.Linear(width, vocab, bias=False)
        self.head.weight = self.emb.weight

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(torch.tanh(self.body(self.emb(ids))))


def tiny_gpt2() -> nn.Module:
    from transformers import GPT2Config, GPT2LMHeadModel

    return GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=64, n_head=2, vocab_size=256))


def make_model(kind: str, seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return TinyTied() if kind == "tiny" else tiny_gpt2()


def make_optim(model: nn.Module) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LambdaLR]:
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0 / (1 + step))
    return optimizer, scheduler


def train_steps(model: nn.Module, optimizer, scheduler, steps: int) -> None:
    vocab = 16 if isinstance(model, TinyTied) else 256
    for _ in range(steps):
        ids = torch.randint(0, vocab, (2, 6))
        if isinstance(model, TinyTied):
            loss = nn.functional.cross_entropy(model(ids).flatten(0, 1), ids.flatten())
        else:
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()


class JsonState:
    """The smallest object with the TrainerState contract save_checkpoint relies on."""

    def __init__(self, global_step: int) -> None:
        self.global_step = global_step

    def save_to_json(self, path: str) -> None:
        with open(path, "w", encoding="utf-8") as handle:
            json.dump({"global_step": self.global_step}, handle)


def draw_rng() -> tuple:
    return random.random(), float(np.random.rand()), torch.rand(3)


def saved_checkpoint(tmp_path, step: int = 3, **kwargs) -> tuple[str, nn.Module]:
    model = make_model("tiny", 0)
    optimizer, scheduler = make_optim(model)
    train_steps(model, optimizer, scheduler, step)
    options = dict(model=model, optimizer=optimizer, scheduler=scheduler, state=JsonState(step))
    options.update(kwargs)
    return save_checkpoint(tmp_path / "out", step, **options), model


def assert_same_state(first: dict, second: dict) -> None:
    torch.testing.assert_close(first, second, rtol=0, atol=0)


# --- Round trips -------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["tiny", "gpt2"])
def test_round_trip_restores_weights_optimizer_scheduler_and_rng(tmp_path, kind):
    """Weights, AdamW state, LambdaLR state and every RNG come back exactly after a save and load."""
    model = make_model(kind, 0)
    optimizer, scheduler = make_optim(model)
    train_steps(model, optimizer, scheduler, 3)
    folder = save_checkpoint(
        tmp_path, 3, model=model, optimizer=optimizer, scheduler=scheduler, state=JsonState(3)
    )
    expected_draws = draw_rng()

    fresh = make_model(kind, 1)
    fresh_optimizer, fresh_scheduler = make_optim(fresh)
    torch.manual_seed(123), random.seed(123), np.random.seed(123)
    load_model_weights(fresh, folder)
    loaded = load_optimizer_and_scheduler(folder, fresh_optimizer, fresh_scheduler)
    assert load_rng_state(folder) is True

    assert loaded == ["optimizer.pt", "scheduler.pt"]
    torch.testing.assert_close(draw_rng(), expected_draws, rtol=0, atol=0)
    assert_same_state(fresh.state_dict(), model.state_dict())
    assert_same_state(fresh_optimizer.state_dict(), optimizer.state_dict())
    assert fresh_scheduler.state_dict() == scheduler.state_dict()


def test_resumed_training_matches_uninterrupted_training(tmp_path):
    """3 steps + save + resume + 2 steps gives the same weights as 5 straight steps."""
    torch.manual_seed(7)
    straight = make_model("tiny", 0)
    optimizer, scheduler = make_optim(straight)
    train_steps(straight, optimizer, scheduler, 3)
    folder = save_checkpoint(tmp_path, 3, model=straight, optimizer=optimizer, scheduler=scheduler, state={})
    train_steps(straight, optimizer, scheduler, 2)

    resumed = make_model("tiny", 5)
    resumed_optimizer, resumed_scheduler = make_optim(resumed)
    load_model_weights(resumed, folder)
    load_optimizer_and_scheduler(folder, resumed_optimizer, resumed_scheduler)
    load_rng_state(folder)
    train_steps(resumed, resumed_optimizer, resumed_scheduler, 2)
    assert_same_state(resumed.state_dict(), straight.state_dict())


def test_gpt2_checkpoint_is_its_save_pretrained_output(tmp_path):
    """A model with save_pretrained writes config.json and a model.safetensors without the tied lm_head."""
    model = make_model("gpt2", 0)
    folder = save_checkpoint(tmp_path, 1, model=model, state=JsonState(1))
    names = set(os.listdir(folder))
    stored = safetensors.torch.load_file(os.path.join(folder, "model.safetensors"))
    assert {"config.json", "model.safetensors", "trainer_state.json", "rng_state.pth"} <= names
    assert "lm_head.weight" not in stored and "transformer.wte.weight" in stored


def test_tied_weights_are_written_once_and_load_strictly(tmp_path):
    """A plain module's shared tensors are stored once and strict loading fills both names."""
    model = make_model("tiny", 0)
    save_model(model, tmp_path)
    stored = safetensors.torch.load_file(tmp_path / "model.safetensors")
    fresh = make_model("tiny", 1)
    result = load_model_weights(fresh, tmp_path, strict=True)
    assert sorted(stored) == ["body.bias", "body.weight", "emb.weight"]
    assert result.missing_keys == [] and result.unexpected_keys == []
    assert fresh.head.weight is fresh.emb.weight
    assert_same_state(fresh.state_dict(), model.state_dict())


class FusedViews(nn.Module):
    """Two buffers that are different slices of one tensor (as a split fused projection can be)."""

    def __init__(self) -> None:
        super().__init__()
        fused = torch.arange(12.0)
        self.register_buffer("first", fused[:6])
        self.register_buffer("second", fused[6:])


def test_overlapping_views_are_copied_not_refused(tmp_path):
    """Tensors sharing storage without being the same view are saved as separate copies."""
    save_model(FusedViews(), tmp_path)
    fresh = FusedViews()
    fresh.first.zero_(), fresh.second.zero_()
    load_model_weights(fresh, tmp_path)
    assert fresh.second.tolist() == [6.0, 7.0, 8.0, 9.0, 10.0, 11.0]


def test_strict_load_names_missing_and_unexpected_keys(tmp_path):
    """A mismatching file raises CheckpointError listing keys; strict=False reports them instead."""
    safetensors.torch.save_file(
        {"emb.weight": torch.zeros(16, 8), "extra": torch.zeros(1)}, tmp_path / "model.safetensors"
    )
    model = make_model("tiny", 0)
    with pytest.raises(
        CheckpointError, match=r"Missing keys: \[body.bias, body.weight\]; unexpected keys: \[extra\]"
    ):
        load_model_weights(model, tmp_path)
    result = load_model_weights(model, tmp_path, strict=False)
    assert (result.missing_keys, result.unexpected_keys) == (["body.bias", "body.weight"], ["extra"])


def write_shards(folder, state_dict: dict, suffix: str) -> None:
    names = sorted(state_dict)
    halves = {f"model-0000{i + 1}-of-00002{suffix}": names[i::2] for i in range(2)}
    for shard, keys in halves.items():
        part = {key: state_dict[key].clone() for key in keys}
        if suffix == ".safetensors":
            safetensors.torch.save_file(part, folder / shard)
        else:
            torch.save(part, folder / shard)
    index_name = (
        "model.safetensors.index.json" if suffix == ".safetensors" else "pytorch_model.bin.index.json"
    )
    weight_map = {key: shard for shard, keys in halves.items() for key in keys}
    (folder / index_name).write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))


@pytest.mark.parametrize("layout", ["safetensors-shards", "bin", "bin-shards"])
def test_other_weight_layouts_load(tmp_path, layout):
    """Sharded safetensors, pytorch_model.bin and sharded .bin checkpoints all load."""
    source = make_model("tiny", 0)
    state_dict = {key: value for key, value in source.state_dict().items() if key != "head.weight"}
    if layout == "bin":
        torch.save(state_dict, tmp_path / "pytorch_model.bin")
    else:
        write_shards(tmp_path, state_dict, ".safetensors" if layout == "safetensors-shards" else ".bin")
    fresh = make_model("tiny", 1)
    load_model_weights(fresh, tmp_path)
    assert_same_state(fresh.state_dict(), source.state_dict())


def test_missing_shard_is_named(tmp_path):
    """An index that lists an absent shard raises CheckpointError naming the shard."""
    write_shards(tmp_path, make_model("tiny", 0).state_dict(), ".safetensors")
    os.remove(tmp_path / "model-00002-of-00002.safetensors")
    with pytest.raises(CheckpointError, match="model-00002-of-00002.safetensors"):
        load_model_weights(make_model("tiny", 1), tmp_path)
    assert not is_checkpoint_complete(tmp_path)


def test_folder_without_weights_is_an_error(tmp_path):
    """load_model_weights on a folder without weights names the folder and the expected files."""
    with pytest.raises(CheckpointError, match="No model weights .*model.safetensors"):
        load_model_weights(make_model("tiny", 0), tmp_path)


# --- What a checkpoint holds ---------------------------------------------------------------------------


def test_save_only_model_writes_no_optimizer_scheduler_or_rng(tmp_path):
    """save_only_model=True writes the model and state only, and the folder is still complete."""
    folder, _ = saved_checkpoint(tmp_path, save_only_model=True)
    assert sorted(os.listdir(folder)) == [
        "checkpoint-manifest.json",
        "model.safetensors",
        "trainer_state.json",
    ]
    assert is_checkpoint_complete(folder)


def test_scaler_args_processing_class_and_extra_files_are_written(tmp_path):
    """scaler.pt, both training-args files, the processor's files and extra files land in the folder."""

    class Processor:
        def save_pretrained(self, folder: str) -> None:
            open(os.path.join(folder, "tokenizer.json"), "w").close()

    scaler = torch.amp.GradScaler("cpu", init_scale=4.0)
    extra = {"notes.txt": "hello", "blob.bin": b"\x00\x01", "made.txt": lambda path: open(path, "w").close()}
    folder, _ = saved_checkpoint(
        tmp_path, scaler=scaler, args={"seed": 3}, processing_class=Processor(), extra_files=extra
    )
    expected = {"scaler.pt", "training_args.bin", "training_args.json", "tokenizer.json", *extra}
    assert expected <= set(os.listdir(folder))
    assert Path(folder, "notes.txt").read_text() == "hello"
    fresh_scaler = torch.amp.GradScaler("cpu")
    model = make_model("tiny", 0)
    loaded = load_optimizer_and_scheduler(folder, make_optim(model)[0], scaler=fresh_scaler)
    assert loaded == ["optimizer.pt", "scaler.pt"] and fresh_scaler.get_scale() == 4.0


def test_training_args_bin_is_a_plain_dict(tmp_path):
    """training_args.bin loads with weights_only=True; enums become values; the JSON twin agrees."""
    import enum

    class Strategy(enum.Enum):
        STEPS = "steps"

    save_model(
        make_model("tiny", 0), tmp_path, args={"save_strategy": Strategy.STEPS, "report_to": ("none",)}
    )
    from_bin = torch.load(tmp_path / "training_args.bin", weights_only=True)
    assert from_bin == {"save_strategy": "steps", "report_to": ["none"]}
    assert json.loads((tmp_path / "training_args.json").read_text()) == from_bin
    os.remove(tmp_path / "training_args.json")
    assert load_training_args(tmp_path) == from_bin


@pytest.mark.parametrize("name", ["extra/evil.txt", "..", ""])
def test_extra_file_names_must_be_plain(tmp_path, name):
    """extra_files keys with a path separator or a special name raise ValueError naming extra_files."""
    with pytest.raises(ValueError, match="extra_files"):
        saved_checkpoint(tmp_path, extra_files={name: b""})


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (dict(global_step=-1), "global_step=-1"),
        (dict(global_step=True), "global_step=True"),
        (dict(world_size=0), "world_size=0"),
        (dict(process_index=2, world_size=2), "process_index=2"),
    ],
)
def test_bad_save_arguments_are_named(tmp_path, call, match):
    """Invalid step, world size or process index raise ValueError quoting the argument."""
    options = dict(global_step=1, model=make_model("tiny", 0))
    options.update(call)
    with pytest.raises(ValueError, match=match):
        save_checkpoint(tmp_path, **options)


def test_saving_the_same_step_again_replaces_the_folder(tmp_path):
    """A second save of step N replaces checkpoint-N and, once it is durable, leaves no staging or old copies."""
    folder, _ = saved_checkpoint(tmp_path, step=2)
    replacement = make_model("tiny", 9)
    save_checkpoint(tmp_path / "out", 2, model=replacement, state=JsonState(2))
    fresh = make_model("tiny", 1)
    load_model_weights(fresh, folder)
    assert_same_state(fresh.state_dict(), replacement.state_dict())
    assert [name for name in os.listdir(tmp_path / "out") if not name.startswith(".")] == ["checkpoint-2"]
    wait_for_durability()
    assert os.listdir(tmp_path / "out") == ["checkpoint-2"]


def test_leftover_staging_folder_is_cleared_by_the_next_save(tmp_path):
    """A staging folder left by a killed save does not leak stale files into the next save."""
    staging = staging_path(tmp_path / "out", 3)
    os.makedirs(staging)
    open(os.path.join(staging, "stale.txt"), "w").close()
    folder, _ = saved_checkpoint(tmp_path, step=3)
    assert "stale.txt" not in os.listdir(folder) and not os.path.exists(staging)


@pytest.mark.parametrize("deferred", [False, True], ids=["durable", "deferred-durability"])
def test_crash_between_the_two_renames_leaves_no_mixed_checkpoint(tmp_path, monkeypatch, deferred):
    """If a replacing save dies after moving the old folder away, checkpoint-N is absent, not mixed. With
    durable saves (``HF_LIGHTNING_DEFERRED_DURABILITY=0``) the resume search falls back to the step before;
    with deferred durability (the default) the old complete copy was only set aside (``.rotated-``), and the
    search gives it its name back."""
    monkeypatch.setenv("HF_LIGHTNING_DEFERRED_DURABILITY", "1" if deferred else "0")
    saved_checkpoint(tmp_path, step=1)
    saved_checkpoint(tmp_path, step=2)
    first_copy = safetensors.torch.load_file(
        os.path.join(checkpoint_path(tmp_path / "out", 2), "model.safetensors")
    )
    real_replace, staging = os.replace, staging_path(tmp_path / "out", 2)

    def dying_replace(src, dst):
        if os.fspath(src) == staging:  # the old folder has just been moved aside
            raise OSError("simulated crash")
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", dying_replace)
    with pytest.raises(OSError, match="simulated crash"):
        save_checkpoint(tmp_path / "out", 2, model=make_model("tiny", 3), state=JsonState(2))
    monkeypatch.undo()
    assert not os.path.exists(checkpoint_path(tmp_path / "out", 2))
    if not deferred:
        assert find_resumable_checkpoint(tmp_path / "out") == str(tmp_path / "out" / "checkpoint-1")
        return
    assert find_resumable_checkpoint(tmp_path / "out") == str(tmp_path / "out" / "checkpoint-2")
    restored = safetensors.torch.load_file(
        os.path.join(checkpoint_path(tmp_path / "out", 2), "model.safetensors")
    )
    assert_same_state(restored, first_copy)


# --- Several processes -----------------------------------------------------------------------------------


def test_ranks_with_a_barrier_publish_one_complete_folder(tmp_path):
    """With a barrier, both ranks' RNG files are inside checkpoint-N when it appears."""
    barrier = threading.Barrier(2)
    results, errors = {}, []

    def rank(index: int) -> None:
        try:
            results[index] = save_checkpoint(
                tmp_path, 4, model=make_model("tiny", 0), state=JsonState(4), process_index=index,
                world_size=2, is_main_process=index == 0, barrier=barrier.wait,
            )  # fmt: skip
        except Exception as exc:  # surfaced below
            errors.append(exc)
            barrier.abort()

    threads = [threading.Thread(target=rank, args=(index,)) for index in range(2)]
    [thread.start() for thread in threads]
    [thread.join() for thread in threads]
    assert errors == []
    assert results[0] == results[1] == checkpoint_path(tmp_path, 4)
    names = set(os.listdir(results[0]))
    assert {"rng_state_0.pth", "rng_state_1.pth"} <= names and "rng_state.pth" not in names


def test_ranks_without_a_barrier_add_their_files_after_publication(tmp_path):
    """Without a barrier, a non-main rank adds rng_state_{rank}.pth to the published folder."""
    model = make_model("tiny", 0)
    with pytest.raises(CheckpointError, match="main process must create"):
        save_checkpoint(tmp_path, 5, model=model, process_index=1, world_size=2, is_main_process=False)
    folder = save_checkpoint(tmp_path, 5, model=model, state=JsonState(5), world_size=2)
    save_checkpoint(tmp_path, 5, model=model, process_index=1, world_size=2, is_main_process=False)
    assert {"rng_state_0.pth", "rng_state_1.pth"} <= set(os.listdir(folder))
    assert load_rng_state(folder, process_index=1, world_size=2) is True


def test_missing_rng_file_is_logged_not_raised(tmp_path, caplog):
    """load_rng_state returns False and logs when this rank has no RNG file."""
    write_rank_files(tmp_path, rng_state=capture_rng_state())
    with caplog.at_level(logging.INFO, logger="hf_lightning.checkpoint.rng_state"):
        assert load_rng_state(tmp_path, process_index=3, world_size=4) is False
    assert "rng_state_3.pth" in caplog.text


# --- Damaged and unsafe files --------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["optimizer.pt", "scheduler.pt", "rng_state.pth", "model.safetensors"])
def test_truncated_file_raises_checkpoint_error_naming_it(tmp_path, name):
    """A file cut in half raises CheckpointError whose message and .path name that file."""
    folder, _ = saved_checkpoint(tmp_path)
    path = os.path.join(folder, name)
    data = Path(path).read_bytes()
    Path(path).write_bytes(data[: len(data) // 2])
    model = make_model("tiny", 1)
    loaders = {
        "optimizer.pt": lambda: load_optimizer_and_scheduler(folder, make_optim(model)[0]),
        "scheduler.pt": lambda: load_optimizer_and_scheduler(folder, None, make_optim(model)[1]),
        "rng_state.pth": lambda: load_rng_state(folder),
        "model.safetensors": lambda: load_model_weights(model, folder),
    }
    with pytest.raises(CheckpointError, match="truncated or corrupt") as caught:
        loaders[name]()
    assert path in str(caught.value) and caught.value.path == path


class Payload:
    """Unpickling this runs a shell command that creates a marker file."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {shlex.quote(self.marker)}",))


@pytest.mark.parametrize("name", ["optimizer.pt", "scheduler.pt", "rng_state.pth", "training_args.bin"])
def test_malicious_pickle_is_refused_and_never_runs(tmp_path, name):
    """A file whose unpickling would run code raises CheckpointError and the code does not run."""
    folder, _ = saved_checkpoint(tmp_path, args={"seed": 1})
    marker = str(tmp_path / "pwned")
    torch.save({"state": Payload(marker), "param_groups": []}, os.path.join(folder, name))
    os.remove(os.path.join(folder, "training_args.json"))
    model = make_model("tiny", 1)
    loaders = {
        "optimizer.pt": lambda: load_optimizer_and_scheduler(folder, make_optim(model)[0]),
        "scheduler.pt": lambda: load_optimizer_and_scheduler(folder, None, make_optim(model)[1]),
        "rng_state.pth": lambda: load_rng_state(folder),
        "training_args.bin": lambda: load_training_args(folder),
    }
    with pytest.raises(CheckpointError, match="Refused to load .* for safety") as caught:
        loaders[name]()
    assert caught.value.path == os.path.join(folder, name)
    assert not os.path.exists(marker)


def test_optimizer_state_that_does_not_fit_is_named(tmp_path):
    """An optimizer.pt for other parameter groups raises CheckpointError naming the file."""
    folder, _ = saved_checkpoint(tmp_path)
    other = torch.optim.AdamW([nn.Parameter(torch.zeros(2)), nn.Parameter(torch.zeros(3))])
    with pytest.raises(CheckpointError, match="optimizer.pt` does not fit the given AdamW"):
        load_optimizer_and_scheduler(folder, other)


# --- Crash safety (a real process killed mid-save) ------------------------------------------------------

SAVER = r"""
import os, sys
import torch
from hf_lightning.checkpoint import save_checkpoint

out, step, phase = sys.argv[1], int(sys.argv[2]), sys.argv[3]

def block(path):
    with open(path, "wb") as handle:
        handle.write(b"partial")
    print("blocked", flush=True)
    sys.stdin.read()  # the test kills us here

class SlowModel(torch.nn.Linear):
    def save_pretrained(self, folder):
        block(os.path.join(folder, "model.safetensors"))

class State:
    def save_to_json(self, path):
        open(path, "w").write("{}")

torch.manual_seed(step)
model = SlowModel(4, 4) if phase == "model" else torch.nn.Linear(4, 4)
optimizer = torch.optim.AdamW(model.parameters())
extra = {"big.bin": block} if phase == "same-step" else None
save_checkpoint(out, step, model=model, optimizer=optimizer, state=State(), extra_files=extra)
print("finished", flush=True)
"""


@pytest.mark.parametrize("phase", ["model", "same-step"])
def test_save_killed_midway_leaves_no_broken_checkpoint(tmp_path, phase):
    """SIGKILL during a save (of a new step, or replacing the same step) leaves checkpoint-1 intact."""
    out = tmp_path / "out"
    torch.manual_seed(1)
    first = torch.nn.Linear(4, 4)
    save_checkpoint(out, 1, model=first, optimizer=torch.optim.AdamW(first.parameters()), state=JsonState(1))
    script = tmp_path / "saver.py"
    script.write_text(SAVER)
    step = 1 if phase == "same-step" else 2
    proc = subprocess.Popen(
        [sys.executable, str(script), str(out), str(step), phase],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    line = proc.stdout.readline()
    proc.send_signal(signal.SIGKILL)
    _, stderr = proc.communicate(timeout=60)
    assert line.strip() == "blocked", stderr

    assert os.path.exists(os.path.join(staging_path(out, step), INCOMPLETE_SENTINEL_NAME))
    for folder in sorted_checkpoints(out):
        probe = torch.nn.Linear(4, 4)
        load_model_weights(probe, folder)
        load_optimizer_and_scheduler(folder, torch.optim.AdamW(probe.parameters()))
    assert sorted_checkpoints(out) == [str(out / "checkpoint-1")]
    assert find_resumable_checkpoint(out) == str(out / "checkpoint-1")
    probe = torch.nn.Linear(4, 4)
    load_model_weights(probe, find_resumable_checkpoint(out))
    assert_same_state(probe.state_dict(), first.state_dict())


# --- Finding and rotating --------------------------------------------------------------------------------


def make_folders(root, steps, complete=True) -> None:
    for step in steps:
        folder = root / f"checkpoint-{step}"
        folder.mkdir(parents=True)
        if complete:
            safetensors.torch.save_file({"w": torch.zeros(1)}, folder / "model.safetensors")
            (folder / "trainer_state.json").write_text("{}")


def test_find_resumable_checkpoint_skips_incomplete_folders_and_says_which(tmp_path, caplog):
    """The newest folder holding the sentinel (or lacking files) is skipped and named in the log."""
    make_folders(tmp_path, [9, 10, 11])
    (tmp_path / "checkpoint-11" / INCOMPLETE_SENTINEL_NAME).write_text("in progress")
    os.remove(tmp_path / "checkpoint-10" / "trainer_state.json")
    (tmp_path / "checkpoint-12").mkdir()
    with caplog.at_level(logging.WARNING):
        found = find_resumable_checkpoint(tmp_path)
    assert found == str(tmp_path / "checkpoint-9")
    skipped = [record.getMessage() for record in caplog.records]
    assert len(skipped) == 3
    assert "checkpoint-11" in skipped[1] and INCOMPLETE_SENTINEL_NAME in skipped[1]
    assert "checkpoint-10" in skipped[2] and "trainer_state.json" in skipped[2]


def test_find_resumable_checkpoint_uses_the_given_logger(tmp_path):
    """A caller's logger receives the skip messages."""
    make_folders(tmp_path, [1])
    (tmp_path / "checkpoint-1" / INCOMPLETE_SENTINEL_NAME).write_text("")
    messages = []
    handler = logging.Handler()
    handler.emit = lambda record: messages.append(record.getMessage())
    custom = logging.getLogger("test_checkpoint.custom")
    custom.addHandler(handler)
    assert find_resumable_checkpoint(tmp_path, logger=custom) is None
    assert len(messages) == 1 and "checkpoint-1" in messages[0]


def test_find_resumable_checkpoint_in_a_missing_folder_is_none(tmp_path):
    """A missing output_dir has no checkpoint to resume from."""
    assert find_resumable_checkpoint(tmp_path / "nope") is None


def test_sorted_checkpoints_orders_numerically_and_spares_the_best(tmp_path):
    """checkpoint-10 sorts after checkpoint-9; the best moves next to the newest; other names are ignored."""
    make_folders(tmp_path, [2, 9, 10, 100], complete=False)
    (tmp_path / ".tmp-checkpoint-200").mkdir()
    (tmp_path / "checkpoint-7-old").mkdir()
    names = [os.path.basename(path) for path in sorted_checkpoints(tmp_path, str(tmp_path / "checkpoint-2"))]
    assert names == ["checkpoint-9", "checkpoint-10", "checkpoint-2", "checkpoint-100"]


def test_rotation_returns_deleted_paths_and_leaves_no_trash(tmp_path):
    """rotate_checkpoints deletes the oldest, keeps the best, and leaves no renamed leftovers."""
    make_folders(tmp_path, [1, 2, 3, 4], complete=False)
    deleted = rotate_checkpoints(tmp_path, 2, best_model_checkpoint=str(tmp_path / "checkpoint-1"))
    assert deleted == [str(tmp_path / "checkpoint-2"), str(tmp_path / "checkpoint-3")]
    assert sorted(os.listdir(tmp_path)) == ["checkpoint-1", "checkpoint-4"]


def test_final_prune_keeps_only_the_best(tmp_path):
    """at_train_end with save_total_limit=1 deletes every checkpoint except the best."""
    make_folders(tmp_path, [1, 2, 3], complete=False)
    deleted = rotate_checkpoints(
        tmp_path, 1, best_model_checkpoint=str(tmp_path / "checkpoint-2"), at_train_end=True
    )
    assert sorted(os.listdir(tmp_path)) == ["checkpoint-2"] and len(deleted) == 2
