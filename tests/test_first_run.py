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
