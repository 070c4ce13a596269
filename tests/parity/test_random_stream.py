"""The same random stream as transformers: a random collator and dropout draw in the same order.

transformers (through accelerate's one-batch look-ahead) collates GA + 1 batches before the first
forward, then GA more before each later step. With ``DataCollatorForLanguageModeling`` (random
masking) and dropout both drawing from the global generator, every logged loss matches only when
hf_lightning collates and runs forwards in that order, before and after a resume.
"""

from __future__ import annotations

import pytest
import torch

from tests.parity._run import BASE_ARGS, step_logs

WORDS = [f"w{i}" for i in range(27)]


def _tokenizer():
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Whitespace
    from transformers import PreTrainedTokenizerFast

    special = ["[PAD]", "[UNK]", "[MASK]", "[CLS]", "[SEP]"]
    vocab = {token: i for i, token in enumerate(special + WORDS)}
    backend = Tokenizer(WordLevel(vocab, unk_token="[UNK]"))
    backend.pre_tokenizer = Whitespace()
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        pad_token="[PAD]",
        unk_token="[UNK]",
        mask_token="[MASK]",
        cls_token="[CLS]",
        sep_token="[SEP]",
    )


def _model(name: str):
    from transformers import BertConfig, BertForMaskedLM

    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=5 + len(WORDS),
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=32,
        hidden_dropout_prob=0.1,
        attention_probs_dropout_prob=0.1,
    )
    model = BertForMaskedLM(config)
    # BERT's masked-LM loss ignores num_items_in_batch: both trainers divide it by the accumulation
    # steps when told so (transformers would otherwise log it GA times too large, divergence 12).
    model.accepts_loss_kwargs = False
    return model


def _data() -> list[dict[str, list[int]]]:
    g = torch.Generator().manual_seed(2)
    return [{"input_ids": torch.randint(5, 5 + len(WORDS), (12,), generator=g).tolist()} for _ in range(48)]


def _train(lib, tmp_path, name: str, resume: str | None = None, **extra):
    from transformers import DataCollatorForLanguageModeling

    args = lib.TrainingArguments(
        output_dir=str(tmp_path / name),
        per_device_train_batch_size=2,
        gradient_accumulation_steps=4,
        max_steps=4,
        logging_steps=1,
        learning_rate=1e-3,
        **{**BASE_ARGS, **extra},
    )
    collator = DataCollatorForLanguageModeling(_tokenizer(), mlm_probability=0.3)
    trainer = lib.Trainer(model=_model(name), args=args, train_dataset=_data(), data_collator=collator)
    trainer.train(resume_from_checkpoint=resume)
    return [
        h["loss"]
        for h in step_logs(trainer)
        if h["step"] > trainer.state.global_step - 4 + (resume is not None) * 2
    ]


@pytest.fixture
def libs():
    import transformers

    import hf_lightning

    return {"hf": transformers, "ours": hf_lightning}


def test_every_logged_loss_of_a_masked_lm_run_equals_transformers(libs, tmp_path):
    """GA 4, dropout on, random masking, the same seed: the four logged losses equal transformers'."""
    theirs = _train(libs["hf"], tmp_path, "hf")
    ours = _train(libs["ours"], tmp_path, "ours")
    assert ours == pytest.approx(theirs, rel=1e-5)


def test_logged_losses_after_a_resume_equal_transformers(libs, tmp_path):
    """Saved at step 2, resumed to step 4 by each library: the resumed steps' losses equal transformers'."""
    resumed = {}
    for name, lib in libs.items():
        _train(lib, tmp_path, name, save_strategy="steps", save_steps=2)
        checkpoint = str(tmp_path / name / "checkpoint-2")
        resumed[name] = _train(lib, tmp_path, f"{name}-resumed", resume=checkpoint)
    assert len(resumed["ours"]) == 2  # steps 3 and 4
    assert resumed["ours"] == pytest.approx(resumed["hf"], rel=1e-5)


_PYTHON_RANDOM_RUN = """
import random, sys
import torch
from {library} import Trainer, TrainingArguments
from tests.tiny import RegressionModel

seen = []


class Data(torch.utils.data.Dataset):
    def __len__(self):
        return 8

    def __getitem__(self, i):
        seen.append(random.random())  # an augmentation drawing from Python's global generator
        return {{"input_x": torch.tensor(float(i)), "labels": torch.tensor(1.0)}}


args = TrainingArguments(sys.argv[1], report_to="none", max_steps=2, seed=42, save_strategy="no",
                         per_device_train_batch_size=2, use_cpu=True, disable_tqdm=True)
Trainer(model=RegressionModel(), args=args, train_dataset=Data()).train()
print(repr(seen))
"""


@pytest.mark.parametrize("library", ["transformers", "hf_lightning"])
def test_python_random_draws_in_a_fresh_process_are_transformers(library, tmp_path):
    """In a fresh process, where train() is the first to import Lightning (whose import draws from Python's
    global ``random``), a dataset drawing from ``random`` sees the numbers that follow ``set_seed(42)``,
    as under transformers."""
    import ast
    import random
    import subprocess
    import sys

    from tests._venv import ROOT

    done = subprocess.run(
        [sys.executable, "-c", _PYTHON_RANDOM_RUN.format(library=library), str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**__import__("os").environ, "PYTHONPATH": ROOT},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    seen = ast.literal_eval(done.stdout.strip().splitlines()[-1])
    random.seed(42)
    assert seen == [random.random() for _ in seen]
