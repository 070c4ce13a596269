"""The Trainer workflow on every architecture of the zoo (tests/parity/zoo_models.py), against transformers.

Each row trains a tiny model built from its config with GA 2, evaluates and saves every 2 steps, and
predicts; ``test_row_matches_transformers`` runs transformers.Trainer and hf_lightning.Trainer on the
same work and asserts the same logged losses, gradient norms, learning rates and evaluation losses,
the same checkpoint folders and files (ours adds the documented ``checkpoint-manifest.json`` and
``training_args.json``), and the same predictions. Where transformers' own loss is GA times off (a
model whose loss is a mean over its micro-batch or a sum: docs/divergences.md, 12), transformers is
given the row's oracle ``compute_loss_func``, which divides the summed loss by ``num_items_in_batch``
(or keeps CTC's sum) — what the loss of the big batch is.

``test_row_load_best_and_resume`` runs hf_lightning with ``load_best_model_at_end``: afterwards every
tensor equals what the model class's ``from_pretrained(best)`` (``PeftModel.from_pretrained`` for an
adapter) loads, and a run resumed from ``checkpoint-2`` is bit-identical to the uninterrupted one (its
logged steps and the weights of ``checkpoint-4``).

A handful of rows run by default; the rest are marked slow.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from tests.parity.zoo_models import ROWS, ZooRow, collate, row

FAST = {"llama", "bert_seq", "t5", "resnet"}
OURS_ONLY_FILES = {"checkpoint-manifest.json", "training_args.json"}  # docs/divergences.md

WORKFLOW = dict(
    per_device_train_batch_size=2,
    per_device_eval_batch_size=3,
    gradient_accumulation_steps=2,
    max_steps=4,
    eval_strategy="steps",
    eval_steps=2,
    save_steps=2,
    logging_steps=1,
    learning_rate=0.05,
    optim="sgd",
    report_to="none",
    use_cpu=True,
    disable_tqdm=True,
    seed=0,
)


def _rows() -> list[Any]:
    return [r.name if r.name in FAST else pytest.param(r.name, marks=pytest.mark.slow) for r in ROWS]


def _trainer(lib: Any, zoo: ZooRow, out: str, oracle: bool = False, **extra: Any) -> Any:
    args = lib.TrainingArguments(out, **{**WORKFLOW, **zoo.args, **extra})
    kwargs = {"compute_loss_func": zoo.oracle} if oracle and zoo.oracle is not None else {}
    return lib.Trainer(
        model=zoo.build(),
        args=args,
        train_dataset=zoo.data(16, 0),
        eval_dataset=zoo.data(6, 1),
        data_collator=zoo.collator or collate,
        **kwargs,
    )


def _entries(trainer: Any, key: str) -> list[dict[str, float]]:
    return [h for h in trainer.state.log_history if key in h]


def _files(out: str) -> dict[str, set[str]]:
    return {
        folder: set(os.listdir(os.path.join(out, folder)))
        for folder in sorted(os.listdir(out))
        if folder.startswith("checkpoint-")
    }


def _assert_nested_close(ours: Any, theirs: Any, where: str = "predictions") -> None:
    if theirs is None or isinstance(theirs, (int, float)):
        assert ours == theirs, where
    elif isinstance(theirs, Mapping):  # a ModelOutput inside the outputs (CLIP's text and vision outputs)
        assert isinstance(ours, Mapping) and list(ours) == list(theirs), where
        for key in theirs:
            _assert_nested_close(ours[key], theirs[key], f"{where}.{key}")
    elif isinstance(theirs, (tuple, list)):
        assert isinstance(ours, (tuple, list)) and len(ours) == len(theirs), where
        for index, (a, b) in enumerate(zip(ours, theirs)):
            _assert_nested_close(a, b, f"{where}[{index}]")
    else:
        np.testing.assert_allclose(np.asarray(ours), np.asarray(theirs), rtol=1e-4, atol=1e-5, err_msg=where)


@pytest.mark.parametrize("name", _rows())
def test_row_matches_transformers(name, tmp_path):
    """Same logged losses, grad norms, learning rates, eval losses, checkpoint files and predictions."""
    import transformers

    import hf_lightning

    zoo = row(name)
    runs = {}
    for label, lib in (("theirs", transformers), ("ours", hf_lightning)):
        trainer = _trainer(lib, zoo, str(tmp_path / label), oracle=label == "theirs")
        trainer.train()
        runs[label] = (trainer, trainer.predict(zoo.data(6, 1), ignore_keys=zoo.ignore_keys))
    (ours, ours_pred), (theirs, theirs_pred) = runs["ours"], runs["theirs"]
    for key, fields in (("loss", ("loss", "grad_norm", "learning_rate")), ("eval_loss", ("eval_loss",))):
        mine, other = _entries(ours, key), _entries(theirs, key)
        assert [h["step"] for h in mine] == [h["step"] for h in other]
        for a, b in zip(mine, other):
            for field in fields:
                torch.testing.assert_close(
                    a[field], b[field], rtol=1e-4, atol=1e-6, msg=f"{field} at {b['step']}"
                )
    files, theirs_files = _files(str(tmp_path / "ours")), _files(str(tmp_path / "theirs"))
    assert {k: v - OURS_ONLY_FILES for k, v in files.items()} == theirs_files
    _assert_nested_close(ours_pred.predictions, theirs_pred.predictions)
    _assert_nested_close(ours_pred.label_ids, theirs_pred.label_ids, "label_ids")
    torch.testing.assert_close(
        ours_pred.metrics["test_loss"], theirs_pred.metrics["test_loss"], rtol=1e-4, atol=1e-6
    )


def _from_pretrained(zoo: ZooRow, folder: str) -> torch.nn.Module:
    if zoo.peft is not None:
        import peft

        return peft.PeftModel.from_pretrained(zoo.peft(), folder)
    return type(zoo.build()).from_pretrained(folder)


def _checkpoint_tensors(folder: str) -> dict[str, torch.Tensor]:
    tensors: dict[str, torch.Tensor] = {}
    for file in sorted(os.listdir(folder)):
        if file.endswith(".safetensors"):
            tensors.update({f"{file}:{k}": v for k, v in load_file(os.path.join(folder, file)).items()})
    return tensors


@pytest.mark.parametrize("name", _rows())
def test_row_load_best_and_resume(name, tmp_path):
    """load_best_model_at_end puts from_pretrained(best)'s every tensor in place; a resume is bit-identical."""
    import hf_lightning

    zoo = row(name)
    full = _trainer(hf_lightning, zoo, str(tmp_path / "full"), load_best_model_at_end=True)
    full.train()
    best = full.state.best_model_checkpoint
    loaded = _from_pretrained(zoo, best).state_dict()
    for key, value in full.model.state_dict().items():
        assert torch.equal(value, loaded[key]), f"{key} differs from from_pretrained({best})"
    resumed = _trainer(hf_lightning, zoo, str(tmp_path / "resumed"), load_best_model_at_end=True)
    resumed.train(resume_from_checkpoint=str(tmp_path / "full" / "checkpoint-2"))
    steps = [h for h in _entries(full, "loss") if h["step"] > 2]
    after = [
        h for h in _entries(resumed, "loss") if h["step"] > 2
    ]  # its log_history starts with the checkpoint's
    assert [{k: h[k] for k in ("step", "loss", "grad_norm")} for h in after] == [
        {k: h[k] for k in ("step", "loss", "grad_norm")} for h in steps
    ]
    again, original = (
        _checkpoint_tensors(str(p / "checkpoint-4")) for p in (tmp_path / "resumed", tmp_path / "full")
    )
    assert again.keys() == original.keys() and again
    for key, value in original.items():
        assert torch.equal(again[key], value), key
