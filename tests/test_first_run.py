"""A transformers user's first run is quiet: the quickstart prints no Lightning warning they cannot act on.

``evaluate()`` before ``train()`` (as the quickstart does) must not make Lightning warn about modules in
eval mode, and no other Lightning line (tips, skipped validation loops, deprecations) reaches stderr.
A Lightning user's own fit keeps Lightning's warnings (docs/divergences.md).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import lightning as L
import pytest
from lightning.pytorch.demos.boring_classes import BoringModel

ROOT = Path(__file__).resolve().parents[1]
QUICKSTART = ROOT / "examples" / "quickstart.py"
STEPS = 2

# A line Lightning wrote: a warning attributed to its files, or its own words.
LIGHTNING_LINE = re.compile(
    r"site-packages/(lightning|lightning_fabric|lightning_utilities|pytorch_lightning)/"
    r"|PossibleUserWarning|LightningDeprecationWarning|litlogger|💡"
)


@pytest.fixture(scope="module")
def quickstart(tmp_path_factory) -> subprocess.CompletedProcess:
    """The quickstart run once, as a user runs it, with Python's default warning filters."""
    folder = tmp_path_factory.mktemp("first_run")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONWARNINGS"}
    return subprocess.run(
        [sys.executable, str(QUICKSTART), "--max_steps", str(STEPS), "--output_dir", str(folder / "out")],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def _lines(stderr: str) -> list[str]:
    """stderr split on newlines and on the carriage returns progress bars redraw with."""
    return [line for line in re.split(r"[\r\n]+", stderr) if line.strip()]


def test_quickstart_exits_cleanly(quickstart):
    """The quickstart finishes with exit status 0 and reports the trained steps."""
    assert quickstart.returncode == 0, quickstart.stderr[-3000:]
    assert f"after {STEPS} steps" in quickstart.stdout


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
