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
                  "Saving model checkpoint", "Training completed", "PyTorch: setting up devices",
                  "max_steps is given")  # fmt: skip


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


DDP_SCRIPT = textwrap.dedent(
    """
    import sys
    import torch
    torch.set_num_threads(1)
    import transformers
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from transformers import DataCollatorForLanguageModeling, PreTrainedTokenizerFast
    from hf_lightning import Trainer, TrainingArguments
    from tests.tiny import tiny_gpt2

    vocab = {"[PAD]": 0, "[UNK]": 1, **{f"w{i}": i + 2 for i in range(8)}}
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(WordLevel(vocab, unk_token="[UNK]")),
                                        pad_token="[PAD]", unk_token="[UNK]")
    data = [{"input_ids": [2 + (i + j) % 8 for j in range(6)]} for i in range(16)]
    args = TrainingArguments(
        sys.argv[1], report_to="none", use_cpu=True, disable_tqdm=True, max_steps=2, save_steps=2,
        per_device_train_batch_size=4, log_level="info", log_level_replica="info",
    )
    collator = DataCollatorForLanguageModeling(tokenizer, mlm=False)
    Trainer(model=tiny_gpt2(), args=args, train_dataset=data, data_collator=collator).train()
    """
)


@pytest.mark.slow
@pytest.mark.ddp
def test_only_the_saving_process_announces_what_it_saves(tmp_path):
    """Two processes, both at INFO: "Saving model checkpoint" and the collator-tokenizer line come from the
    process that saves (rank 0) only, as in transformers; both print the training header."""
    from tests._ddp import run_ranks

    script = tmp_path / "script.py"
    script.write_text(DDP_SCRIPT)
    outputs = [output for _, output in run_ranks(str(script), [str(tmp_path / "out")], timeout=400)]
    for rank, output in enumerate(outputs):
        assert "***** Running training *****" in output
        saves = [
            line
            for line in output.splitlines()
            if "Saving model checkpoint" in line or "data_collator" in line
        ]
        assert len(saves) == (2 if rank == 0 else 0), (rank, saves)
    assert os.path.isfile(tmp_path / "out" / "checkpoint-2" / "tokenizer.json")


IMPORT_SCRIPT = textwrap.dedent(
    """
    import sys
    import torch
    torch.set_num_threads(1)
    from {lib} import Trainer, TrainingArguments
    from tests.tiny import causal_lm_data, tiny_gpt2

    args = TrainingArguments(sys.argv[1], report_to="none", use_cpu=True, save_strategy="no")
    print("deepspeed before:", "deepspeed" in sys.modules, flush=True)
    Trainer(model=tiny_gpt2(), args=args, train_dataset=causal_lm_data(4))
    print("deepspeed after:", "deepspeed" in sys.modules, flush=True)
    """
)


def test_deepspeed_is_imported_at_construction_as_in_transformers(tmp_path):
    """transformers' ``__init__`` imports DeepSpeed when it is installed (accelerate's ``unwrap_model``); its
    import-time console line then comes at construction. Here too, never at the first save or not at all."""
    outputs = {}
    for lib in ("transformers", "hf_lightning"):
        script = tmp_path / f"{lib}_import.py"
        script.write_text(IMPORT_SCRIPT.format(lib=lib))
        env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "CUDA_VISIBLE_DEVICES": ""}
        done = subprocess.run(
            [sys.executable, str(script), str(tmp_path / lib)],
            capture_output=True, text=True, env=env, cwd=str(ROOT), timeout=600,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]
        outputs[lib] = [line for line in done.stdout.splitlines() if line.startswith("deepspeed ")]
    assert outputs["hf_lightning"] == outputs["transformers"]
    assert outputs["hf_lightning"][0] == "deepspeed before: False"


DEPRECATION_SCRIPT = textwrap.dedent(
    """
    import warnings
    from {lib} import Seq2SeqTrainingArguments, TrainingArguments

    warnings.simplefilter("default")
    TrainingArguments("out", gradient_checkpointing=True, report_to="none")
    Seq2SeqTrainingArguments("out", gradient_checkpointing=True, report_to="none")
    """
)


def test_the_gradient_checkpointing_deprecation_shows_once_as_in_transformers(tmp_path):
    """transformers warns at a line of its own, so Python shows it once per process; so do we (it pointed at
    the dataclass's generated ``__init__``, ``<string>``, once per argument class)."""
    shown = {}
    for lib in ("transformers", "hf_lightning"):
        script = tmp_path / f"{lib}_deprecation.py"
        script.write_text(DEPRECATION_SCRIPT.format(lib=lib))
        env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
        done = subprocess.run(
            [sys.executable, str(script)],
            capture_output=True,
            text=True,
            env=env,
            cwd=str(tmp_path),
            timeout=300,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        shown[lib] = [
            line for line in done.stderr.splitlines() if "FutureWarning: `gradient_checkpointing`" in line
        ]
    assert len(shown["transformers"]) == 1
    assert len(shown["hf_lightning"]) == 1
    assert not shown["hf_lightning"][0].startswith("<string>")


PLAIN_SCRIPT = textwrap.dedent(
    """
    import sys
    import torch
    from torch import nn
    from {lib} import Trainer, TrainingArguments

    torch.set_num_threads(1)


    class Scale(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Parameter(torch.zeros(1))

        def forward(self, x, labels=None):
            return {{"loss": ((x * self.a - labels) ** 2).mean()}}


    data = [{{"x": torch.tensor([float(i)]), "labels": torch.tensor([2.0 * i])}} for i in range(8)]
    args = TrainingArguments(sys.argv[1], max_steps=2, report_to="none", log_level="info", save_strategy="no",
                             disable_tqdm=True, use_cpu=True)
    trainer = Trainer(Scale(), args, train_dataset=data, eval_dataset=data)
    trainer.train()
    trainer.evaluate()
    """
)


def test_a_script_that_never_imports_transformers_prints_its_lines_as_transformers(tmp_path):
    """A plain module, transformers installed but not imported by the script: every Trainer line comes through
    transformers' handler from the first (they printed as ``[hf_lightning]`` until the first fit loaded it)."""
    prefixes = {}
    for lib in ("transformers", "hf_lightning"):
        script = tmp_path / f"{lib}_plain.py"
        script.write_text(PLAIN_SCRIPT.format(lib=lib))
        env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "CUDA_VISIBLE_DEVICES": ""}
        env.pop("CI", None)
        done = subprocess.run(
            [sys.executable, str(script), str(tmp_path / lib)],
            capture_output=True, text=True, env=env, cwd=str(tmp_path), timeout=600,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]
        prefixes[lib] = [
            m.group(0) for m in re.finditer(r"^\[(transformers|hf_lightning)\]", done.stderr, re.M)
        ]
    assert "[transformers]" in prefixes["transformers"]
    assert prefixes["hf_lightning"] == prefixes["transformers"]
