"""``hf_lightning.use_as_transformers_trainer()``: transformers' Trainer names answer with hf_lightning's, reversibly.

Each check runs in a fresh Python process (the binding is about what a process imports, and this test
process has imported transformers' classes long ago).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("transformers")

ROOT = str(Path(__file__).resolve().parents[2])


def run_python(code: str, tmp_path: Path) -> subprocess.CompletedProcess:
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=tmp_path, capture_output=True, text=True, timeout=600,
        env={"PYTHONPATH": f"{tmp_path}:{ROOT}", "PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1"},
    )  # fmt: skip
    return done


def test_binding_answers_every_name_and_undoes(tmp_path):
    """Bound: every way of naming transformers' classes gives hf_lightning's (also after transformers rebuilds its
    top-level module); a class defined then subclasses ours; undone: transformers' classes again, and the class
    defined meanwhile keeps hf_lightning's base; a second call while bound returns the same binding."""
    done = run_python(
        """
        import hf_lightning, transformers
        originals = (transformers.Trainer, transformers.TrainingArguments, transformers.Seq2SeqTrainer,
                     transformers.Seq2SeqTrainingArguments)
        binding = hf_lightning.use_as_transformers_trainer()
        assert binding.active and hf_lightning.use_as_transformers_trainer() is binding
        import transformers.trainer, transformers.training_args, transformers.trainer_seq2seq
        import transformers.processing_utils  # re-executes transformers/__init__.py: a new top-level module
        import sys
        from transformers import Trainer, TrainingArguments, Seq2SeqTrainer, Seq2SeqTrainingArguments
        assert (Trainer, TrainingArguments, Seq2SeqTrainer, Seq2SeqTrainingArguments) == (
            hf_lightning.Trainer, hf_lightning.TrainingArguments, hf_lightning.Seq2SeqTrainer,
            hf_lightning.Seq2SeqTrainingArguments)
        assert sys.modules["transformers"].Trainer is hf_lightning.Trainer
        assert transformers.trainer.Trainer is hf_lightning.Trainer
        assert transformers.training_args.TrainingArguments is hf_lightning.TrainingArguments
        assert transformers.trainer_seq2seq.Seq2SeqTrainer is hf_lightning.Seq2SeqTrainer
        class Library(transformers.trainer.Trainer):
            pass
        binding.undo()
        assert not binding.active
        assert (transformers.Trainer, transformers.TrainingArguments, transformers.Seq2SeqTrainer,
                transformers.Seq2SeqTrainingArguments) == originals
        from transformers import Trainer as again
        assert again is originals[0] and sys.modules["transformers"].Trainer is originals[0]
        assert transformers.trainer.Trainer is originals[0]
        assert issubclass(Library, hf_lightning.Trainer)
        del again  # a global holding transformers' Trainer would (rightly) refuse the next binding
        with hf_lightning.use_as_transformers_trainer() as bound:
            assert transformers.Trainer is hf_lightning.Trainer
        assert not bound.active and transformers.Trainer is originals[0]
        print("ok")
        """,
        tmp_path,
    )
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stderr[-3000:]


def test_binding_after_the_library_was_imported_is_refused_naming_it(tmp_path):
    """A module that took transformers' Trainer (or subclassed it) first is named in a RuntimeError; nothing is bound."""
    (tmp_path / "early_library.py").write_text(
        "from transformers import Trainer, TrainingArguments\n\nclass EarlyTrainer(Trainer):\n    pass\n"
    )
    done = run_python(
        """
        import early_library, hf_lightning, transformers
        try:
            hf_lightning.use_as_transformers_trainer()
        except RuntimeError as error:
            print(error)
        assert transformers.Trainer is early_library.Trainer  # left as it was
        """,
        tmp_path,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    message = done.stdout
    assert "must run before the libraries that subclass transformers' Trainer are imported" in message
    assert "early_library (EarlyTrainer)" in message and "early_library (Trainer)" in message
    assert "early_library (TrainingArguments)" in message


def test_binding_without_transformers_names_the_extra(tmp_path):
    """Without transformers an ImportError says what to install."""
    done = run_python(
        """
        import sys
        sys.modules["transformers"] = None  # as if it were not installed
        import hf_lightning
        try:
            hf_lightning.use_as_transformers_trainer()
        except ImportError as error:
            print(error)
        """,
        tmp_path,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert 'pip install "hf-lightning[transformers]"' in done.stdout
