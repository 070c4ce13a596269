"""JIT checkpoints on SIGTERM: the signal is owned while training, the step in progress finishes, its
state is saved as checkpoint-{step} (docs/divergences.md, divergence 7), training stops cleanly and resumes to the
weights of an uninterrupted run."""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import signal
import subprocess
import sys
import textwrap

import lightning as L
import pytest
import torch
from torch import nn

import hf_lightning
from hf_lightning.adapters.callbacks.jit_checkpoint import JITCheckpoint
from hf_lightning.callbacks import TrainerCallback
from hf_lightning.checkpoint import is_checkpoint_complete, load_model_weights
from hf_lightning.checkpoint.jit import JITTimings, SigtermWatch, should_stop
from hf_lightning.utils import logging as hf_logging
from tests.tiny import RegressionModel, regression_data

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MAX_STEPS = 12


@contextlib.contextmanager
def _info_lines(caplog):
    """hf_lightning's INFO lines on, captured; its verbosity given back to transformers' after."""
    hf_logging.set_verbosity_info()
    try:
        with caplog.at_level("INFO"):
            yield
    finally:
        hf_logging.set_verbosity(hf_logging.NOTSET)


def make_trainer(output_dir: str, callbacks=None, **kwargs) -> hf_lightning.Trainer:
    """Regression with dropout, 2 x GA 2 on 20 shuffled samples (5 steps per epoch), JIT on, kill_wait 0."""
    args = hf_lightning.TrainingArguments(
        **{
            "output_dir": output_dir,
            "report_to": "none",
            "use_cpu": True,
            "disable_tqdm": True,
            "seed": 0,
            "max_steps": MAX_STEPS,
            "per_device_train_batch_size": 2,
            "gradient_accumulation_steps": 2,
            "learning_rate": 0.05,
            "logging_steps": 1,
            "save_strategy": "no",
            "enable_jit_checkpoint": True,
            **kwargs,
        }
    )
    trainer = hf_lightning.Trainer(
        model=RegressionModel(dropout=0.2), args=args, train_dataset=regression_data(20), callbacks=callbacks
    )
    trainer.jit_kill_wait = 0
    return trainer


class SigtermAt(TrainerCallback):
    """Sends SIGTERM to this process when optimizer step ``step`` begins."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_step_begin(self, args, state, control, **kwargs):
        if state.global_step + 1 == self.step:
            os.kill(os.getpid(), signal.SIGTERM)


@pytest.fixture(scope="module")
def straight(tmp_path_factory):
    """The uninterrupted run, saving every step (its checkpoint-k is the state after step k)."""
    out = tmp_path_factory.mktemp("straight")
    trainer = make_trainer(str(out), save_strategy="steps", save_steps=1, enable_jit_checkpoint=False)
    trainer.train()
    return trainer


def _weights(folder) -> dict[str, torch.Tensor]:
    model = RegressionModel(dropout=0.2)
    load_model_weights(model, folder)
    return model.state_dict()


def _assert_same(first: dict[str, torch.Tensor], second: dict[str, torch.Tensor]) -> None:
    for name, value in first.items():
        torch.testing.assert_close(second[name], value, rtol=0, atol=0, msg=name)


# --- in this process --------------------------------------------------------------------------------
@pytest.mark.parametrize("step", [1, 5, 7])
def test_sigterm_saves_the_state_after_the_step_in_progress(tmp_path, straight, step):
    """SIGTERM during step k: checkpoint-k holds exactly the state after step k, and training stops there."""
    trainer = make_trainer(str(tmp_path), callbacks=[SigtermAt(step)])
    output = trainer.train()
    assert output.global_step == trainer.state.global_step == step
    folder = tmp_path / f"checkpoint-{step}"
    assert os.listdir(tmp_path) == [f"checkpoint-{step}"] and is_checkpoint_complete(folder)
    _assert_same(_weights(os.path.join(straight.args.output_dir, f"checkpoint-{step}")), _weights(folder))


def test_resuming_a_jit_checkpoint_reaches_the_uninterrupted_weights(tmp_path, straight):
    """Resuming from the JIT checkpoint ends with the weights and losses of the uninterrupted run."""
    make_trainer(str(tmp_path), callbacks=[SigtermAt(7)]).train()
    resumed = make_trainer(str(tmp_path))
    resumed.train(resume_from_checkpoint=True)
    _assert_same(straight.model.state_dict(), resumed.model.state_dict())
    losses = [h["loss"] for h in resumed.state.log_history if "loss" in h]
    assert losses == [h["loss"] for h in straight.state.log_history if "loss" in h]


def test_previous_sigterm_handler_is_restored_after_train(tmp_path):
    """The handler installed before train() is back afterwards, whether or not SIGTERM arrived."""

    def previous(signum, frame):
        raise AssertionError("the JIT handler should have received this SIGTERM")

    old = signal.signal(signal.SIGTERM, previous)
    try:
        make_trainer(str(tmp_path / "a"), callbacks=[SigtermAt(3)]).train()
        assert signal.getsignal(signal.SIGTERM) is previous
        make_trainer(str(tmp_path / "b")).train()
        assert signal.getsignal(signal.SIGTERM) is previous
    finally:
        signal.signal(signal.SIGTERM, old)


def test_step_already_saved_by_the_schedule_is_not_written_twice(tmp_path, caplog):
    """A SIGTERM during a step the save schedule saves stops there without a second save."""
    trainer = make_trainer(str(tmp_path), callbacks=[SigtermAt(4)], save_strategy="steps", save_steps=2)
    with _info_lines(caplog):
        trainer.train()
    assert sorted(os.listdir(tmp_path)) == ["checkpoint-2", "checkpoint-4"]
    assert "just written by the save schedule" in caplog.text


class SaveAt(TrainerCallback):
    """Asks for a save at the end of optimizer step ``step`` while ``active``."""

    def __init__(self, step: int) -> None:
        self.step, self.active = step, True

    def on_step_end(self, args, state, control, **kwargs):
        if self.active and state.global_step == self.step:
            control.should_save = True


def test_step_saved_by_an_earlier_train_is_written_again(tmp_path, caplog):
    """ "Already written" means by this run: a later train() of the same trainer stopped at the step an
    earlier one saved writes its JIT checkpoint."""
    save = SaveAt(4)
    trainer = make_trainer(str(tmp_path), callbacks=[save, SigtermAt(4)])
    with _info_lines(caplog):
        trainer.train()
    assert os.listdir(tmp_path) == ["checkpoint-4"] and "just written by the save schedule" in caplog.text
    shutil.rmtree(tmp_path / "checkpoint-4")
    save.active = False
    caplog.clear()
    with _info_lines(caplog):
        trainer.train()  # from step 0 again: SIGTERM during step 4, no scheduled save there
    assert trainer.state.global_step == 4 and os.listdir(tmp_path) == ["checkpoint-4"]
    assert is_checkpoint_complete(tmp_path / "checkpoint-4") and "just written" not in caplog.text


def test_log_reports_step_save_and_grace_period(tmp_path, caplog):
    """The JIT log states the measured step and save times and the grace period including kill_wait."""
    with caplog.at_level("WARNING"):
        make_trainer(str(tmp_path), callbacks=[SigtermAt(2)]).train()
    report = [r.getMessage() for r in caplog.records if "JIT checkpoint after step 2" in r.getMessage()]
    assert len(report) == 1
    assert "longest optimizer step" in report[0] and "+ save" in report[0] and "kill_wait 0s" in report[0]
    assert "terminationGracePeriodSeconds" in report[0] and "--signal=TERM@" in report[0]


# --- the engine-free parts -------------------------------------------------------------------------------
def test_watch_owns_sigterm_only_while_installed():
    """SigtermWatch takes SIGTERM over on install and gives it back on uninstall."""
    before = signal.getsignal(signal.SIGTERM)
    watch = SigtermWatch(kill_wait=0)
    watch.install()
    assert signal.getsignal(signal.SIGTERM) == watch._on_sigterm
    os.kill(os.getpid(), signal.SIGTERM)
    assert watch.requested and watch.received
    watch.uninstall()
    assert signal.getsignal(signal.SIGTERM) == before


def test_kill_wait_delays_the_request():
    """With kill_wait > 0 a SIGTERM requests the checkpoint only when the kill_wait timer fires."""
    watch = SigtermWatch(kill_wait=3)
    watch.install()
    try:
        os.kill(os.getpid(), signal.SIGTERM)
        os.kill(os.getpid(), signal.SIGTERM)  # a second SIGTERM starts no second timer
        timer = watch._timer
        assert not watch.requested and timer.interval == 3
        timer.function()
        assert watch.requested
    finally:
        watch.uninstall()
    assert timer.finished.is_set()  # cancelled: it will not fire after training


@pytest.mark.parametrize("kill_wait", [-1, "3", True])
def test_kill_wait_must_be_non_negative_seconds(kill_wait):
    """A kill_wait that is not a non-negative number is refused, naming it."""
    with pytest.raises(ValueError, match="kill_wait"):
        SigtermWatch(kill_wait)


@pytest.mark.parametrize(
    ("here", "others", "expected"),
    [
        (False, None, False),
        (True, None, True),
        (False, True, True),
        (True, False, True),
        (False, False, False),
    ],
)
def test_all_ranks_stop_when_any_rank_was_asked(here, others, expected):
    """should_stop: one rank's request stops every rank (the engine reduces with "any")."""
    any_rank = None if others is None else (lambda local: local or others)
    assert should_stop(here, any_rank) is expected


@pytest.mark.parametrize(("step", "save", "kill_wait", "seconds"), [(1.2, 2.5, 3, 7), (0.01, 0.02, 0, 1)])
def test_grace_period_is_step_plus_save_plus_kill_wait(step, save, kill_wait, seconds):
    """The reported grace period is the longest step + save + kill_wait, rounded up."""
    timings = JITTimings(kill_wait=kill_wait)
    timings.record_step(step / 2)
    timings.record_step(step)
    assert "save time is unknown" in timings.report()
    timings.record_save(save)
    assert timings.grace_period() == pytest.approx(step + save + kill_wait)
    assert f"--signal=TERM@{seconds})" in timings.report()


# --- a plain lightning.Trainer ------------------------------------------------------------------------------
class LitRegression(L.LightningModule):
    """A plain LightningModule; sends itself SIGTERM at batch ``sigterm_at``."""

    def __init__(self, sigterm_at: int) -> None:
        super().__init__()
        self.net = nn.Linear(1, 1)
        self.sigterm_at = sigterm_at

    def training_step(self, batch, batch_idx):
        if batch_idx == self.sigterm_at:
            os.kill(os.getpid(), signal.SIGTERM)
        x, y = batch
        return nn.functional.mse_loss(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05)


def test_lightning_user_gets_a_jit_checkpoint_instead_of_sigterm_exception(tmp_path):
    """JITCheckpoint in a plain lightning.Trainer: Lightning's SIGTERM handling is bypassed, the HF folder written."""
    x = torch.randn(16, 1)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, 2 * x), batch_size=2)
    callback = JITCheckpoint(tmp_path, kill_wait=0)
    trainer = L.Trainer(
        max_steps=8,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[callback],
    )
    trainer.fit(LitRegression(sigterm_at=2), loader)
    assert callback.stopped_at == trainer.global_step == 3 and not trainer.received_sigterm
    assert is_checkpoint_complete(tmp_path / "checkpoint-3")
    assert {"optimizer.pt", "rng_state.pth"} <= set(os.listdir(tmp_path / "checkpoint-3"))


def test_jit_checkpoint_needs_somewhere_to_save():
    """JITCheckpoint() without output_dir or save is refused."""
    with pytest.raises(ValueError, match="output_dir"):
        JITCheckpoint()


# --- a real process receiving SIGTERM from outside --------------------------------------------------------------
CHILD = """
import sys
import torch
torch.set_num_threads(1)
sys.path.insert(0, {root!r})
from hf_lightning.callbacks import TrainerCallback
from tests.checkpoint.test_jit_checkpoint import make_trainer

class PauseAt(TrainerCallback):
    def on_step_begin(self, args, state, control, **kwargs):
        if state.global_step + 1 == {step}:
            print("STEP", state.global_step + 1, flush=True)
            sys.stdin.readline()  # the parent sends SIGTERM, then lets the step continue

output = make_trainer({out!r}, callbacks=[PauseAt()]).train()
print("STOPPED", output.global_step, flush=True)
"""


def _run_child(tmp_path, step: int) -> tuple[int, str]:
    script = tmp_path / "child.py"
    out = tmp_path / "out"
    script.write_text(textwrap.dedent(CHILD.format(root=ROOT, step=step, out=str(out))))
    with open(tmp_path / "child.err", "w") as errors:
        child = subprocess.Popen(
            [sys.executable, str(script)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=errors,
            text=True,
            cwd=ROOT,
        )
        try:
            line = ""
            for line in iter(child.stdout.readline, ""):
                if line.startswith("STEP"):
                    break
            assert line.split() == ["STEP", str(step)], line
            child.send_signal(signal.SIGTERM)
            child.stdin.write("go\n")
            child.stdin.flush()
            stdout, _ = child.communicate(timeout=120)
        finally:
            if child.poll() is None:
                child.kill()
    return child.returncode, stdout + (tmp_path / "child.err").read_text()


def _check_stop_point(tmp_path, straight, step: int) -> None:
    returncode, output = _run_child(tmp_path, step)
    assert returncode == 0, output[-3000:]
    assert f"STOPPED {step}" in output
    folder = tmp_path / "out" / f"checkpoint-{step}"
    assert is_checkpoint_complete(folder)
    _assert_same(_weights(os.path.join(straight.args.output_dir, f"checkpoint-{step}")), _weights(folder))
    resumed = make_trainer(str(tmp_path / "out"))
    resumed.train(resume_from_checkpoint=True)
    _assert_same(straight.model.state_dict(), resumed.model.state_dict())


def test_sigterm_from_outside_exits_zero_and_resumes_identically(tmp_path, straight):
    """A training process SIGTERMed by another process exits 0 with checkpoint-k; resuming matches straight."""
    _check_stop_point(tmp_path, straight, step=6)


@pytest.mark.slow
@pytest.mark.parametrize("step", sorted(random.Random(5).sample(range(1, MAX_STEPS), 5)))
def test_sigterm_at_random_steps(tmp_path, straight, step):
    """Five random stop points: exit 0, a complete checkpoint at the stop step, identical resumed weights."""
    _check_stop_point(tmp_path, straight, step)


# --- several ranks (2 CPU processes, gloo) ------------------------------------------------------------------
DDP_CHILD = """
import os, sys
import torch
torch.set_num_threads(1)
sys.path.insert(0, {root!r})
from hf_lightning.callbacks import TrainerCallback
from tests.checkpoint.test_jit_checkpoint import make_trainer

rank, mode = int(os.environ["RANK"]), sys.argv[2]

class PauseOnRankOne(TrainerCallback):
    def on_step_begin(self, args, state, control, **kwargs):
        if rank == 1 and state.global_step + 1 == {step}:
            print("STEP", state.global_step + 1, flush=True)
            sys.stdin.readline()

trainer = make_trainer(sys.argv[1], callbacks=[PauseOnRankOne()] if mode == "jit" else None)
output = trainer.train(resume_from_checkpoint=True if mode == "resume" else None)
if rank == 0 and mode != "jit":
    os.makedirs(sys.argv[1], exist_ok=True)
    torch.save(trainer.model.state_dict(), os.path.join(sys.argv[1], "final.pt"))
print("RANK", rank, "STOPPED", output.global_step, flush=True)
"""


def _launch_ddp(tmp_path, out, mode: str, step: int) -> list[str]:
    """Run the DDP child on 2 ranks; in "jit" mode only rank 1 receives SIGTERM during ``step``."""
    import socket

    script = tmp_path / "ddp_child.py"
    script.write_text(textwrap.dedent(DDP_CHILD.format(root=ROOT, step=step)))
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = str(sock.getsockname()[1])
    procs = []
    for rank in (0, 1):
        env = {
            **os.environ,
            "WORLD_SIZE": "2",
            "RANK": str(rank),
            "LOCAL_RANK": str(rank),
            "LOCAL_WORLD_SIZE": "2",
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": port,
        }
        procs.append(
            subprocess.Popen(
                [sys.executable, str(script), str(out), mode],
                env=env,
                cwd=ROOT,
                text=True,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=open(tmp_path / f"rank{rank}-{mode}.err", "w"),
            )
        )
    try:
        if mode == "jit":
            line = ""
            for line in iter(procs[1].stdout.readline, ""):
                if line.startswith("STEP"):
                    break
            assert line.split() == ["STEP", str(step)], line
            procs[1].send_signal(signal.SIGTERM)
            procs[1].stdin.write("go\n")
            procs[1].stdin.flush()
        outputs = [proc.communicate(timeout=300)[0] for proc in procs]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
    assert [proc.returncode for proc in procs] == [0, 0], (tmp_path / f"rank0-{mode}.err").read_text()[-3000:]
    return outputs


@pytest.mark.slow
def test_ranks_agree_on_the_stop_step_and_resume_identically(tmp_path):
    """With 2 ranks and SIGTERM on rank 1 only, both stop after the same step, save it, and resume to straight."""
    outputs = _launch_ddp(tmp_path, tmp_path / "run", "jit", step=4)
    assert all("STOPPED 4" in output for output in outputs)
    files = set(os.listdir(tmp_path / "run" / "checkpoint-4"))
    assert {"rng_state_0.pth", "rng_state_1.pth", "optimizer.pt", "trainer_state.json"} <= files
    _launch_ddp(tmp_path, tmp_path / "run", "resume", step=4)
    _launch_ddp(tmp_path, tmp_path / "straight", "straight", step=4)
    resumed = torch.load(tmp_path / "run" / "final.pt", weights_only=True)
    for name, value in torch.load(tmp_path / "straight" / "final.pt", weights_only=True).items():
        torch.testing.assert_close(resumed[name], value, rtol=0, atol=0, msg=name)
