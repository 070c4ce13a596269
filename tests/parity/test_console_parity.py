"""The console of an example-style script: the Trainer's lines appear on the same stream, in the same format.

transformers' example scripts send the application's logging to stdout (``logging.basicConfig``) and turn on
transformers' own stderr handler with its explicit format. Each backend runs the same script in a fresh
process; the Trainer's lines (the file:line of the explicit format aside) must be on stderr in both, in the
same order, and on stdout in neither.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("transformers")

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent(
    """
    import logging, sys
    import torch
    torch.set_num_threads(1)
    import transformers
    from {lib} import Trainer, TrainingArguments
    from tests.tiny import causal_lm_data, tiny_gpt2

    logging.basicConfig(
        format="%(asctime)s - %(levelname)s - %(name)s - %(message)s",
        datefmt="%m/%d/%Y %H:%M:%S",
        handlers=[logging.StreamHandler(sys.stdout)],
    )
    transformers.utils.logging.set_verbosity_info()
    transformers.utils.logging.enable_default_handler()
    transformers.utils.logging.enable_explicit_format()
    data = causal_lm_data(16, ragged=False)
    args = TrainingArguments(
        sys.argv[1], report_to="none", use_cpu=True, disable_tqdm=True, seed=0, max_steps=2,
        per_device_train_batch_size=4, save_strategy="steps", save_steps=2, logging_steps=1,
    )
    trainer = Trainer(model=tiny_gpt2(), args=args, train_dataset=data, eval_dataset=data[:4])
    trainer.train()
    trainer.evaluate()
    """
)

_EXPLICIT = re.compile(r"^\[(INFO|WARNING|ERROR)\|[^\]]+\] \S+ \S+ >> (.*)$")
# transformers' Trainer's own messages (the model's, e.g. "Configuration saved in", come from transformers in both)
_TRAINER_LINES = ("*****", "  Num ", "  Total ", "  Instantaneous", "  Gradient", "  Number of", "  Batch size",
                  "Saving model checkpoint", "Training completed", "PyTorch: setting up devices")  # fmt: skip


def _run(lib: str, tmp_path: Path) -> tuple[list[str], str]:
    script = tmp_path / f"{lib}_script.py"
    script.write_text(SCRIPT.format(lib=lib))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "CUDA_VISIBLE_DEVICES": ""}
    env.pop("CI", None)  # CI=1 makes transformers' library logger propagate
    done = subprocess.run(
        [sys.executable, str(script), str(tmp_path / lib)],
        capture_output=True, text=True, env=env, cwd=str(ROOT), timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    lines = []
    for line in done.stderr.splitlines():
        match = _EXPLICIT.match(line)
        if match and match.group(2).startswith(_TRAINER_LINES):
            lines.append(f"{match.group(1)} {match.group(2)}".replace(str(tmp_path / lib), "OUT"))
    return lines, done.stdout


def test_trainer_lines_are_on_stderr_in_transformers_format_and_not_on_stdout(tmp_path):
    theirs, their_stdout = _run("transformers", tmp_path)
    ours, our_stdout = _run("hf_lightning", tmp_path)
    assert "INFO ***** Running training *****" in theirs
    assert ours == theirs
    for line in ours:
        message = line.split(" ", 1)[1].strip()
        assert message not in their_stdout and message not in our_stdout
