"""Parity of ``Trainer.create_model_card`` with transformers.Trainer 5.24.

The same short run (tiny GPT-2, evaluation every 2 steps with an accuracy metric) with both
trainers, each in an output folder of the same name; both cards are parsed back with
huggingface_hub's ``ModelCard.load`` and compared: metadata, hyperparameters, results table.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
import transformers
from huggingface_hub import ModelCard

import hf_lightning
from tests.parity._run import BASE_ARGS
from tests.tiny import causal_lm_data, tiny_gpt2

LIBS = {"hf": transformers, "ours": hf_lightning}
CARD_ARGS = dict(
    language="en",
    license="mit",
    tags=["my-tag"],
    finetuned_from="org/base-model",
    tasks="text-generation",
    dataset_tags="wikitext",
    dataset="WikiText",
    dataset_args="wikitext-2-raw-v1",
)


def accuracy(eval_pred) -> dict[str, float]:
    preds, labels = eval_pred.predictions.argmax(-1), eval_pred.label_ids
    mask = labels[:, 1:] != -100
    return {"accuracy": float((preds[:, :-1][mask] == labels[:, 1:][mask]).mean())}


def _trainer(name: str, tmp_path) -> Any:
    lib = LIBS[name]
    args = lib.TrainingArguments(
        output_dir=str(tmp_path / name / "tiny-gpt2-run"),
        **{**BASE_ARGS, "seed": 0},
        max_steps=4,
        per_device_train_batch_size=4,
        per_device_eval_batch_size=4,
        logging_steps=1,
        eval_strategy="steps",
        eval_steps=2,
        learning_rate=1e-3,
    )
    return lib.Trainer(
        model=tiny_gpt2(fix_hf_count=True, dropout=0.0),
        args=args,
        train_dataset=causal_lm_data(16, ragged=False),
        eval_dataset=causal_lm_data(8, seed=1, ragged=False),
        compute_metrics=accuracy,
    )


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> dict[str, Any]:
    """Both trainers after the same 4-step run."""
    tmp_path = tmp_path_factory.mktemp("card")
    trainers = {name: _trainer(name, tmp_path) for name in LIBS}
    for trainer in trainers.values():
        trainer.train()
    return trainers


def _card(trainer: Any, **kwargs: Any) -> ModelCard:
    trainer.create_model_card(**kwargs)
    return ModelCard.load(f"{trainer.args.output_dir}/README.md")


def _section(card: ModelCard, title: str) -> list[str]:
    """The non-empty lines of the Markdown section headed ``### title``."""
    lines = card.text.splitlines()
    start = lines.index(f"### {title}") + 1
    end = next((i for i in range(start, len(lines)) if lines[i].startswith("#")), len(lines))
    return [line for line in lines[start:end] if line.strip()]


def _bullets(card: ModelCard, title: str) -> dict[str, str]:
    items = [line[2:].split(": ", 1) for line in _section(card, title) if line.startswith("- ")]
    return {item[0]: item[1] if len(item) > 1 else "" for item in items}


def _table(card: ModelCard) -> list[dict[str, str]]:
    rows = [
        [cell.strip() for cell in line.strip("|").split("|")] for line in _section(card, "Training results")
    ]
    header, body = rows[0], rows[2:]
    return [dict(zip(header, row)) for row in body]


def assert_same(theirs: Any, mine: Any, path: str = "") -> None:
    """Equal structures; floats equal to 1e-4 relative (the two runs' losses agree to float noise)."""
    if isinstance(theirs, float) or isinstance(mine, float):
        assert math.isclose(mine, theirs, rel_tol=1e-4, abs_tol=1e-6), path
    elif isinstance(theirs, dict):
        assert isinstance(mine, dict) and sorted(mine) == sorted(theirs), (
            f"{path}: {sorted(mine)} != {sorted(theirs)}"
        )
        for key in theirs:
            assert_same(theirs[key], mine[key], f"{path}.{key}")
    elif isinstance(theirs, list):
        assert isinstance(mine, list) and len(mine) == len(theirs), path
        for i, (a, b) in enumerate(zip(theirs, mine)):
            assert_same(a, b, f"{path}[{i}]")
    else:
        assert mine == theirs, f"{path}: {mine!r} != {theirs!r}"


def _cell(value: str) -> Any:
    try:
        return float(value)
    except ValueError:
        return value


def test_default_card_metadata_matches(trained):
    """With no arguments, the card's metadata (model-index, tags, library) equals transformers'."""
    theirs, mine = (_card(trained[name]) for name in LIBS)
    assert_same(theirs.data.to_dict(), mine.data.to_dict())


def test_card_metadata_with_arguments_matches(trained):
    """With language, license, tags, task and dataset given, the metadata equals transformers'."""
    theirs, mine = (_card(trained[name], **{**CARD_ARGS, "tags": ["my-tag"]}) for name in LIBS)
    assert_same(theirs.data.to_dict(), mine.data.to_dict())
    assert mine.data.to_dict()["model-index"][0]["results"], "the model-index holds the evaluation"


def test_hyperparameters_match(trained):
    """The training hyperparameters list the same names and values."""
    theirs, mine = (_card(trained[name]) for name in LIBS)
    assert _bullets(mine, "Training hyperparameters") == _bullets(theirs, "Training hyperparameters")


def test_results_table_matches(trained):
    """The training results table has the same columns and values, row by row."""
    theirs, mine = (_card(trained[name]) for name in LIBS)
    assert len(_table(theirs)) == 2
    assert_same(
        [{k: _cell(v) for k, v in row.items()} for row in _table(theirs)],
        [{k: _cell(v) for k, v in row.items()} for row in _table(mine)],
    )


def _layout(card: ModelCard, first: str, last: str) -> list[str]:
    """The lines from heading ``first`` to heading ``last``: table rows as ``|row|``, blank lines as ``""``."""
    lines = card.text.splitlines()
    start, end = lines.index(first), lines.index(last)
    return ["|row|" if line.startswith("|") else line for line in lines[start : end + 1]]


def test_results_table_is_laid_out_as_transformers(trained):
    """The same blank lines around the results table, to the next heading, as transformers writes."""
    layouts = [
        _layout(_card(trained[name]), "### Training results", "### Framework versions") for name in LIBS
    ]
    assert layouts[1] == layouts[0]


def _last_evaluation(card: ModelCard) -> dict[str, str]:
    """The ``- name: value`` lines above the first ``##`` heading."""
    lines = card.text.splitlines()
    end = next(i for i, line in enumerate(lines) if line.startswith("## "))
    return dict(line[2:].split(": ", 1) for line in lines[:end] if line.startswith("- "))


def test_last_evaluation_listed_in_text(trained):
    """The text lists the last evaluation's metrics with the same names and values."""
    theirs, mine = (_last_evaluation(_card(trained[name])) for name in LIBS)
    assert len(theirs) >= 2
    assert_same({k: float(v) for k, v in theirs.items()}, {k: float(v) for k, v in mine.items()})


def test_framework_versions_present(trained):
    """Framework versions name PyTorch and Transformers as transformers' card does, plus Lightning."""
    mine = _bullets(_card(trained["ours"]), "Framework versions")
    theirs = _bullets(_card(trained["hf"]), "Framework versions")
    for name in ("hf_lightning", "Lightning", "Pytorch", "Transformers"):
        assert any(line.startswith(name + " ") for line in mine), name
    assert {line.split()[0] for line in theirs} <= {line.split()[0] for line in mine}


def test_card_of_an_untrained_model_on_a_datasets_dataset_matches(tmp_path):
    """Before any training, with a datasets.Dataset (no builder name), the card equals transformers'."""
    import datasets

    data = datasets.Dataset.from_dict({"input_ids": [[1, 2, 3]] * 4, "labels": [[1, 2, 3]] * 4})
    cards = {}
    for name, lib in LIBS.items():
        args = lib.TrainingArguments(output_dir=str(tmp_path / name / "untrained"), **BASE_ARGS)
        trainer = lib.Trainer(model=tiny_gpt2(), args=args, train_dataset=data, eval_dataset=data)
        cards[name] = _card(trainer, tasks="text-generation")
    assert_same(cards["hf"].data.to_dict(), cards["ours"].data.to_dict())
    assert "Training results" not in cards["ours"].text
    assert _bullets(cards["ours"], "Training hyperparameters") == _bullets(
        cards["hf"], "Training hyperparameters"
    )


def _header(trainer: Any, **kwargs: Any) -> str:
    """The card's YAML header as written (between the first two ``---`` lines)."""
    trainer.create_model_card(**kwargs)
    text = open(f"{trainer.args.output_dir}/README.md", encoding="utf-8").read()
    assert text.startswith("---\n")
    return text[4 : text.index("\n---\n", 4) + 1]


@pytest.mark.parametrize("with_card_args", [True, False])
def test_the_yaml_header_is_transformers_text(trained, with_card_args):
    """The metadata block is transformers' text byte for byte: its keys in its order (library_name, language,
    license, base_model, tags, datasets, metrics, model-index), the model-index laid out as its own."""
    kwargs = CARD_ARGS if with_card_args else {}
    assert _header(trained["ours"], **kwargs) == _header(trained["hf"], **kwargs)
