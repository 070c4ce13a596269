"""A transformers user's first run is quiet: the quickstart prints progress bars and its results, no warning.

The quickstart runs as the README has a newcomer run it: in a (simulated, tests/_venv.py) fresh venv holding
only the extra the README names for it, with Python's default warning filters. ``evaluate()`` before
``train()`` must not make Lightning warn about modules in eval mode, no other Lightning line (tips,
skipped validation loops, deprecations) reaches stderr, and neither does transformers' ``loss_type=None``
notice: stderr is progress bars only. A Lightning user's own fit keeps Lightning's warnings
(docs/divergences.md).
"""

from __future__ import annotations

import re
import subprocess

import lightning as L
import pytest
from lightning.pytorch.demos.boring_classes import BoringModel

from tests._venv import example_argv, readme_examples, run_in_venv

STEPS = 2
# A line of a tqdm progress bar ("Writing model shards:  0%|          | 0/1 [00:00<?, ?it/s]"), or a
# bar's blank redraw.
PROGRESS_BAR = re.compile(r"\d+%\|.*\| *\d+/\d+ \[|^\s*$")

# A line Lightning wrote: a warning attributed to its files, or its own words.
LIGHTNING_LINE = re.compile(
    r"site-packages/(lightning|lightning_fabric|lightning_utilities|pytorch_lightning)/"
    r"|PossibleUserWarning|LightningDeprecationWarning|litlogger|💡"
)


@pytest.fixture(scope="module")
def quickstart(tmp_path_factory) -> subprocess.CompletedProcess:
    """The README's quickstart command run once, from the README's install for it, with a short run."""
    folder = tmp_path_factory.mktemp("first_run")
    command, extra = readme_examples()["quickstart"]
    argv = example_argv(command, "--max_steps", str(STEPS), "--output_dir", str(folder / "out"))
    return run_in_venv((extra,), argv, cwd=folder)


def _lines(stderr: str) -> list[str]:
    """stderr split on newlines and on the carriage returns progress bars redraw with."""
    return [line for line in re.split(r"[\r\n]+", stderr) if line.strip()]


def test_quickstart_exits_cleanly(quickstart):
    """The quickstart finishes with exit status 0 and reports the trained steps."""
    assert quickstart.returncode == 0, quickstart.stderr[-3000:]
    assert f"after {STEPS} steps" in quickstart.stdout


def test_quickstart_stderr_is_progress_bars_only(quickstart):
    """No warning line on stderr: not Lightning's, not transformers' `loss_type=None ... unrecognized`."""
    assert "loss_type" not in quickstart.stderr
    assert [line for line in _lines(quickstart.stderr) if not PROGRESS_BAR.search(line)] == []


def test_quickstart_prints_its_losses_before_and_after(quickstart):
    """stdout: the evaluation loss and perplexity before and after training, and where the model went."""
    lines = quickstart.stdout.splitlines()
    assert re.fullmatch(r"before training: eval loss \d+\.\d{3}, perplexity \d+\.\d", lines[0])
    assert any(
        re.fullmatch(rf"after {STEPS} steps: eval loss \d+\.\d{{3}}, perplexity \d+\.\d", x) for x in lines
    )
    assert lines[-1].startswith("model saved to ")


def test_quickstart_prints_no_lightning_warning(quickstart):
    """No line of the quickstart's stderr comes from Lightning (eval-mode check, tips, skipped loops)."""
    assert [line for line in _lines(quickstart.stderr) if LIGHTNING_LINE.search(line)] == []


def test_training_progress_bar_shows_the_real_total(quickstart):
    """The training bar counts to max_steps; no bar shows a negative total (``0/-2``)."""
    lines = _lines(quickstart.stderr)
    assert any(f"{STEPS}/{STEPS} [" in line for line in lines)
    assert [line for line in lines if re.search(r"\d+/-\d+", line)] == []


def test_a_plain_lightning_fit_keeps_its_eval_mode_warning(tmp_path):
    """A Lightning user's module left in eval mode still gets Lightning's own warning."""
    model = BoringModel()
    model.eval()
    trainer = L.Trainer(
        default_root_dir=tmp_path,
        max_steps=1,
        accelerator="cpu",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=0,
    )
    with pytest.warns(UserWarning, match="in eval mode at the start of training"):
        trainer.fit(model)


ONCE_SCRIPT = """
import sys, warnings
import torch
torch.set_num_threads(1)
from {lib} import Trainer, TrainingArguments
from tests.tiny import causal_lm_data, tiny_gpt2

warnings.simplefilter("default")


def note():
    warnings.warn("a note of the user's", UserWarning)


args = TrainingArguments(sys.argv[1], report_to="none", use_cpu=True, max_steps=1, save_strategy="no")
trainer = Trainer(model=tiny_gpt2(), args=args, train_dataset=causal_lm_data(4))
trainer.train()  # the first fit imports the engine (whose imports may change the filters)
note()
trainer.train()
note()
"""


@pytest.mark.parametrize("lib", ["transformers", "hf_lightning"])
def test_a_warning_shown_once_stays_shown_after_train(lib, tmp_path):
    """Python shows a "default" warning once per location; a later ``train()`` does not make it forget (it did:
    the fit's warning filters reset Python's record, so the note came back after every ``train()``)."""
    import os
    import sys
    from pathlib import Path

    pytest.importorskip(lib)
    script = tmp_path / "once.py"
    script.write_text(ONCE_SCRIPT.format(lib=lib))
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": str(root), "HF_HUB_OFFLINE": "1", "CUDA_VISIBLE_DEVICES": ""}
    done = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "out")],
        capture_output=True, text=True, env=env, cwd=str(root), timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stderr.count("UserWarning: a note of the user's") == 1


def test_an_error_filter_does_not_turn_the_dropped_lightning_warnings_into_errors(tmp_path):
    """Under ``-W error`` (a filter that raises), the Lightning warnings the Trainer's fit drops are filtered,
    not raised: a model left in eval mode trains (Lightning warns about it at the start of a fit)."""
    import warnings

    from hf_lightning import Trainer, TrainingArguments
    from tests.tiny import causal_lm_data, tiny_gpt2

    model = tiny_gpt2().eval()
    args = TrainingArguments(str(tmp_path), report_to="none", use_cpu=True, max_steps=1, save_strategy="no")
    trainer = Trainer(model=model, args=args, train_dataset=causal_lm_data(4))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        trainer.train()
    assert trainer.state.global_step == 1
