"""Signals during ``train()`` behave as under transformers' Trainer, which leaves the process's handlers alone.

Lightning's fit installs its own SIGTERM handler (a graceful stop that raises ``SystemExit`` and ends the
process with exit status 0, and SLURM requeueing on SIGUSR1); ``hf_lightning.Trainer`` keeps it out, so a
scheduler's SIGTERM ends the process as it does a transformers run (killed by the signal), and a handler
the script installed is the one that runs.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SCRIPT = textwrap.dedent(
    """
    import os, signal, sys, torch
    torch.set_num_threads(1)
    sys.path.insert(0, {root!r})
    from hf_lightning import Trainer, TrainerCallback, TrainingArguments
    from tests.tiny import RegressionModel, regression_data

    marker, mode = sys.argv[1], sys.argv[2]
    if mode == "handler":
        signal.signal(signal.SIGTERM, lambda signum, frame: open(marker + ".handled", "w").close())

    class Started(TrainerCallback):
        def on_step_end(self, args, state, control, **kw):
            if state.global_step == 2:
                open(marker, "w").close()
            if mode == "handler" and os.path.exists(marker + ".handled"):
                control.should_training_stop = True

    args = TrainingArguments({out!r}, max_steps=100000, per_device_train_batch_size=8, report_to="none",
                             disable_tqdm=True, save_strategy="no", logging_strategy="no")
    trainer = Trainer(RegressionModel(), args, train_dataset=regression_data(64), callbacks=[Started()])
    trainer.train()
    print("returned at step", trainer.state.global_step)
    """
)


def _run_and_terminate(tmp_path, mode: str) -> subprocess.CompletedProcess:
    script = tmp_path / "script.py"
    script.write_text(SCRIPT.format(root=ROOT, out=str(tmp_path / "out")))
    marker = tmp_path / "training"
    proc = subprocess.Popen(
        [sys.executable, str(script), str(marker), mode],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 240
    while not marker.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert marker.exists(), "training never reached step 2"
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


@pytest.mark.skipif(
    sys.platform == "win32", reason="Windows has no SIGTERM handlers: send_signal terminates the process"
)
def test_sigterm_ends_the_process_as_the_default_action_does(tmp_path):
    """Killed by the signal (exit status 143 in a shell), as a transformers run is; not a clean exit 0."""
    done = _run_and_terminate(tmp_path, "default")
    assert done.returncode == -signal.SIGTERM, (done.returncode, done.stderr[-2000:])
    assert "returned at step" not in done.stdout


@pytest.mark.skipif(
    sys.platform == "win32", reason="Windows has no SIGTERM handlers: send_signal terminates the process"
)
def test_a_sigterm_handler_of_the_script_is_the_one_that_runs(tmp_path):
    """The script's own handler runs during training (Lightning's does not replace it) and training goes on
    until the script decides."""
    done = _run_and_terminate(tmp_path, "handler")
    assert done.returncode == 0, done.stderr[-2000:]
    assert (tmp_path / "training.handled").exists()
    assert "returned at step" in done.stdout
    assert "SIGTERM" not in done.stderr  # no line of Lightning's about the signal
