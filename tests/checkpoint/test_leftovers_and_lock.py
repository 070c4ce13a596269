"""What interrupted saves leave is removed at the next start and never pushed; one job at a time trains into
an output_dir, and a dead one never blocks the next (checkpoint/leftovers.py, checkpoint/lock.py).

transformers 5.24 leaves nothing of the kind (it writes checkpoint-N in place, so a kill leaves a
half-written checkpoint-N instead) and does not notice a second job in the same output_dir: both write
into the same checkpoint folders."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from huggingface_hub.utils import filter_repo_objects

import hf_lightning
from hf_lightning.checkpoint.leftovers import LOCK_NAME, find_leftovers
from hf_lightning.checkpoint.lock import OutputDirBusyError, OutputDirLock, claim_output_dir
from hf_lightning.trainer.hub import IGNORE_PATTERNS
from tests._ddp import run_ranks
from tests.tiny import RegressionModel, regression_data

LEFTOVERS = (
    ".tmp-checkpoint-3/checkpoint-is-incomplete.txt",
    ".tmp-checkpoint-3/model.safetensors",
    ".trash-checkpoint-1-4242/optimizer.pt",
    ".old-checkpoint-2-4242/model.safetensors",
    ".trash-.old-checkpoint-2-4242-4242/scheduler.pt",
    "checkpoint-2/rng_state_1.pth.tmp-4242",
)
KEPT = ("checkpoint-2/model.safetensors", "notes.tmp", ".tmp-other/file", "model.safetensors", "config.json")


def _trainer(output_dir, **kwargs) -> hf_lightning.Trainer:
    args = hf_lightning.TrainingArguments(
        output_dir=str(output_dir),
        **{"report_to": "none", "use_cpu": True, "disable_tqdm": True, "max_steps": 2, "save_strategy": "no",
           "per_device_train_batch_size": 4, **kwargs},
    )  # fmt: skip
    return hf_lightning.Trainer(model=RegressionModel(), args=args, train_dataset=regression_data(8))


@pytest.fixture
def littered(tmp_path):
    """output_dir with every kind of leftover, user files, and two leftover names that are links outside."""
    out, outside = tmp_path / "out", tmp_path / "outside"
    outside.mkdir()
    (outside / "precious.bin").write_bytes(b"keep")
    for rel in LEFTOVERS + KEPT:
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        (out / rel).write_bytes(b"x")
    (out / ".tmp-checkpoint-9").symlink_to(outside, target_is_directory=True)
    (out / ".trash-checkpoint-7-99").symlink_to(outside / "precious.bin")
    return out, outside


class _AtStart(hf_lightning.TrainerCallback):
    def __init__(self, out) -> None:
        self.out, self.found, self.lock = out, None, None

    def on_train_begin(self, args, state, control, **kwargs):
        self.found = find_leftovers(self.out)
        self.lock = json.loads((Path(self.out) / LOCK_NAME).read_text())


def test_leftovers_are_removed_at_the_next_start_without_following_links(littered, caplog):
    """train() removes each leftover before its first step, unlinks (never follows) the links, and says so;
    the user's files, the checkpoints and the link targets outside output_dir stay."""
    out, outside = littered
    assert len(find_leftovers(out)) == 7
    look = _AtStart(out)
    trainer = _trainer(out)
    trainer.add_callback(look)
    with caplog.at_level("WARNING"):
        trainer.train()
    assert look.found == [] and find_leftovers(out) == []
    assert ".tmp-checkpoint-3" in caplog.text and "interrupted" in caplog.text
    assert all((out / rel).is_file() for rel in KEPT)
    assert (outside / "precious.bin").read_bytes() == b"keep" and not (out / ".tmp-checkpoint-9").exists()
    assert look.lock["pid"] == os.getpid() and not (out / LOCK_NAME).exists()  # held while training only


def test_hub_ignore_patterns_cover_every_temporary_name(littered):
    """huggingface_hub's own filter (what upload_folder applies) with our patterns drops every leftover, the
    lock file and the checkpoints; the model files in output_dir are pushed."""
    out, _ = littered
    (out / LOCK_NAME).write_text("{}")
    files = [p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file() or p.is_symlink()]
    pushed = set(filter_repo_objects(files, ignore_patterns=IGNORE_PATTERNS))
    assert pushed == {"notes.tmp", ".tmp-other/file", "model.safetensors", "config.json"}


# --- the lock -----------------------------------------------------------------------------------------------
HOLDER = """
import fcntl, json, os, sys, time
path = sys.argv[1]
fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
fcntl.flock(fd, fcntl.LOCK_EX)  # what OutputDirLock does, without importing the library
os.write(fd, json.dumps({"pid": os.getpid(), "host": os.uname().nodename, "started": "now", "command": "job-one"}).encode())
print("held", flush=True)
time.sleep(120)
"""


@pytest.fixture
def other_job(tmp_path):
    """A process holding output_dir's lock, as a running training job does."""
    out = tmp_path / "out"
    out.mkdir()
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(out / LOCK_NAME)], stdout=subprocess.PIPE, text=True
    )
    assert holder.stdout.readline().strip() == "held"
    yield out, holder
    holder.kill()
    holder.wait()


def test_second_job_is_refused_by_name_before_any_step(other_job):
    """A second train() into the same output_dir raises OutputDirBusyError naming the other process, before
    a step or a file of its own."""
    out, holder = other_job
    trainer = _trainer(out, save_strategy="steps", save_steps=1)
    with pytest.raises(
        OutputDirBusyError, match=rf"process {holder.pid} on .*job-one.*{LOCK_NAME}"
    ) as caught:
        trainer.train()
    assert caught.value.holder["pid"] == holder.pid
    assert trainer.state.global_step == 0 and sorted(os.listdir(out)) == [LOCK_NAME]


def test_a_killed_job_does_not_block_the_next(other_job):
    """SIGKILL the job holding the lock: its lock file stays, naming it, but the next train() runs."""
    out, holder = other_job
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    assert json.loads((out / LOCK_NAME).read_text())["pid"] == holder.pid  # the stale file is still there
    assert _trainer(out).train().global_step == 2
    assert not (out / LOCK_NAME).exists()


def test_a_forked_child_does_not_keep_the_lock_of_its_dead_parent(tmp_path):
    """Data loader workers are forked: the child closes its copy of the lock's descriptor, so when the parent
    is gone (its descriptor closed by the kernel), the lock is free although the child still runs."""
    with claim_output_dir(tmp_path, lock=True, clean=False):
        ready, started = os.pipe()
        child = os.fork()
        if child == 0:  # pragma: no cover - the child (its at-fork handlers have run)
            os.write(started, b"1")
            time.sleep(30)
            os._exit(0)
        assert os.read(ready, 1) == b"1"
        from hf_lightning.checkpoint import lock as lock_module

        held = lock_module._HELD[os.path.realpath(tmp_path)][0]
        os.close(held.fd)  # what the kernel does when this process dies
        held.fd = None
        try:
            fresh = OutputDirLock(tmp_path)
            fresh.acquire()  # would raise OutputDirBusyError if the child held the lock
            fresh.release()
        finally:
            os.kill(child, signal.SIGKILL)
            os.waitpid(child, 0)
            os.close(ready)
            os.close(started)


def test_nested_train_into_the_same_folder_reenters(tmp_path):
    """The same process claiming the folder again (a train() inside a callback) is not refused."""
    with claim_output_dir(tmp_path, lock=True, clean=False):
        assert _trainer(tmp_path).train().global_step == 2
        assert (tmp_path / LOCK_NAME).exists()  # still the outer claim's
    assert not (tmp_path / LOCK_NAME).exists()


@pytest.mark.ddp
@pytest.mark.slow
def test_two_processes_of_one_torchrun_job_share_one_lock(tmp_path):
    """Under torchrun only process 0 takes the lock: the job does not refuse itself, every rank trains."""
    run_ranks(__file__, [str(tmp_path / "out"), str(tmp_path)], world=2)
    seen = [json.loads((tmp_path / f"rank{rank}.json").read_text()) for rank in range(2)]
    assert [s["global_step"] for s in seen] == [2, 2]
    assert seen[0]["lock_pid"] == seen[1]["lock_pid"] == seen[0]["pid"]  # rank 0 holds it for both
    assert not (tmp_path / "out" / LOCK_NAME).exists()


class _LockOwner(hf_lightning.TrainerCallback):
    def __init__(self, out) -> None:
        self.out, self.pid = out, None

    def on_step_end(self, args, state, control, **kwargs):
        self.pid = json.loads((Path(self.out) / LOCK_NAME).read_text())["pid"]


if __name__ == "__main__":
    torch.set_num_threads(1)
    output_dir, results = sys.argv[1], Path(sys.argv[2])
    owner = _LockOwner(output_dir)
    ddp_trainer = _trainer(output_dir, save_strategy="steps", save_steps=1)
    ddp_trainer.add_callback(owner)
    done = ddp_trainer.train()
    payload = {"global_step": done.global_step, "lock_pid": owner.pid, "pid": os.getpid()}
    (results / f"rank{os.environ['RANK']}.json").write_text(json.dumps(payload))
