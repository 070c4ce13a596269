"""``Trainer.create_model_card``: the draft ``README.md`` transformers writes in ``output_dir``.

The YAML header is transformers' own text (its keys in its order, ``yaml.dump`` unsorted): the library,
tags (always ``generated_from_trainer``), datasets, metrics and a ``model-index``
holding the last evaluation's metrics per task and dataset; the text lists the last evaluation,
the training hyperparameters, a table of every evaluation of the run (from ``state.log_history``)
and the framework versions. It runs on the main process only, as in transformers. The values
follow transformers' ``TrainingSummary``, so the same run gives the same card (see docs/logging.md).
"""

from __future__ import annotations

import os
from importlib import metadata
from typing import Any

import yaml

from hf_lightning.args.hyperparameters import hyperparameters_of
from hf_lightning.trainer.model_card_summary import (
    TASK_NAMES,
    as_list,
    results_of,
    rounded,
    run_summary,
)
from hf_lightning.utils.logging import get_logger

logger = get_logger(__name__)

__all__ = ["create_model_card"]

# evaluation metrics that become metric tags of the card (``Rouge1`` reports ``rouge``)
_METRIC_TAGS = (
    "accuracy",
    "bleu",
    "f1",
    "matthews_correlation",
    "pearsonr",
    "precision",
    "recall",
    "rouge",
    "sacrebleu",
    "spearmanr",
    "wer",
)


# --- the card -----------------------------------------------------------------------------------
def _results(summary: dict[str, Any], metrics: dict[str, str]) -> list[dict[str, Any]]:
    """The model-index results: one per task and dataset, each with every metric; an entry missing the task,
    the dataset or the metrics is left out (logged), as transformers leaves it out."""
    tags = summary["dataset_tags"]
    names = dict(zip(tags, summary["dataset"]))
    args = dict(zip(tags, summary["dataset_args"] + [None] * len(tags)))
    meta = dict(zip(tags, summary["dataset_metadata"]))
    tasks: dict[Any, Any] = {task: TASK_NAMES[task] for task in summary["tasks"] if task in TASK_NAMES}
    if not tasks and not names:
        return []
    results = []
    for task in tasks or {None: None}:
        for tag in names or {None: None}:
            result: dict[str, Any] = {}
            if task is not None:
                result["task"] = {"name": tasks[task], "type": task}
            if tag is not None:
                result["dataset"] = {"name": names[tag], "type": tag, **meta.get(tag, {})}
                if args[tag] is not None:
                    result["dataset"]["args"] = args[tag]
            if metrics:
                result["metrics"] = [
                    {"name": label, "type": key, "value": summary["eval_results"][label]}
                    for key, label in metrics.items()
                ]
            if {"task", "dataset", "metrics"} <= result.keys():
                results.append(result)
            else:
                logger.info(
                    f"Dropping the following result as it does not have all the necessary fields:\n{result}"
                )
    return results


def _metric_tags(eval_results: dict[str, Any] | None) -> dict[str, str]:
    tags: dict[str, str] = {}
    for label in eval_results or {}:
        key = label.lower().replace(" ", "_")
        if key in _METRIC_TAGS:
            tags[key] = label
        elif key == "rouge1":
            tags["rouge"] = label
    return tags


def _metadata(summary: dict[str, Any]) -> dict[str, Any]:
    """The card's YAML header: transformers' keys in transformers' order, absent ones left out."""
    metrics = _metric_tags(summary["eval_results"])
    base_model = summary["finetuned_from"]
    metadata: dict[str, Any] = {"library_name": "transformers"}
    _put_list(metadata, "language", summary["language"])
    if summary["license"] is not None:
        metadata["license"] = summary["license"]
    if isinstance(base_model, str) and base_model:
        metadata["base_model"] = base_model
    _put_list(metadata, "tags", summary["tags"])
    _put_list(metadata, "datasets", summary["dataset_tags"])
    _put_list(metadata, "metrics", list(metrics))
    metadata["model-index"] = [{"name": summary["model_name"], "results": _results(summary, metrics)}]
    return metadata


def _put_list(metadata: dict[str, Any], key: str, values: Any) -> None:
    listed = [value for value in as_list(values) if value is not None]
    if listed:
        metadata[key] = listed


def _body(summary: dict[str, Any], hyperparameters: dict[str, Any], rows: list[dict] | None) -> str:
    """The card's Markdown text below the metadata."""
    lines = [
        "",
        "<!-- Drafted by the Trainer from what it saw during the run: please review and complete it,"
        " then delete this comment. -->",
        "",
        f"# {summary['model_name']}",
        "",
        f"{_origin(summary['finetuned_from'])} on {_datasets_phrase(summary['dataset'])}.",
    ]
    if summary["eval_results"] is not None:
        lines.append("It achieves the following results on the evaluation set:")
        lines += [f"- {name}: {rounded(value)}" for name, value in summary["eval_results"].items()]
    for section in ("Model description", "Intended uses & limitations", "Training and evaluation data"):
        lines += ["", f"## {section}", "", "More information needed"]
    lines += ["", "## Training procedure", "", "### Training hyperparameters", ""]
    lines.append("The following hyperparameters were used during training:")
    lines += [f"- {name}: {value}" for name, value in hyperparameters.items()]
    if rows is not None:
        lines += ["", "### Training results", "", _table(rows)]
    lines += ["", "### Framework versions", ""]
    lines += [f"- {name} {version}" for name, version in _versions()]
    return "\n".join(lines) + "\n"


def _origin(finetuned_from: str | None) -> str:
    if finetuned_from is None:
        return "This model was trained from scratch"
    return (
        f"This model is a fine-tuned version of [{finetuned_from}](https://huggingface.co/{finetuned_from})"
    )


def _datasets_phrase(dataset: Any) -> str:
    names = as_list(dataset)
    if not names:
        return "an unknown dataset"
    if len(names) == 1:
        return f"the {names[0]} dataset"
    return ", ".join(f"the {name}" for name in names[:-1]) + f" and the {names[-1]} datasets"


def _table(rows: list[dict[str, Any]]) -> str:
    """A Markdown table of ``rows`` (the first row's keys are the columns), values rounded to 4 places."""
    if not rows:
        return ""
    columns = list(rows[0])
    cells = [[rounded(row.get(column)) for column in columns] for row in rows]
    widths = [max([len(column)] + [len(line[i]) for line in cells]) for i, column in enumerate(columns)]

    def line(values: list[str]) -> str:
        return "".join(f"| {value.ljust(width)} " for value, width in zip(values, widths)) + "|"

    rule = "".join(f"|:{'-' * width}:" for width in widths) + "|"
    # each row ends its line, as transformers' table: two blank lines before the next heading
    return "\n".join([line(columns), rule, *(line(values) for values in cells)]) + "\n"


def _versions() -> list[tuple[str, str]]:
    """hf_lightning, Lightning and PyTorch, then Transformers, Datasets and Tokenizers when installed."""
    found = []
    for label, distribution in (
        ("hf_lightning", "hf_lightning"),
        ("Lightning", "lightning"),
        ("Pytorch", "torch"),
        ("Transformers", "transformers"),
        ("Datasets", "datasets"),
        ("Tokenizers", "tokenizers"),
    ):
        try:
            found.append((label, metadata.version(distribution)))
        except metadata.PackageNotFoundError:
            continue
    return found


# --- the entry point ----------------------------------------------------------------------------
def create_model_card(
    trainer: Any,
    language: str | None = None,
    license: str | None = None,
    tags: str | list[str] | None = None,
    model_name: str | None = None,
    finetuned_from: str | None = None,
    tasks: str | list[str] | None = None,
    dataset_tags: str | list[str] | None = None,
    dataset: str | list[str] | None = None,
    dataset_args: str | list[str] | None = None,
) -> None:
    """Write ``README.md`` in ``trainer.args.output_dir`` describing the run (main process only)."""
    from huggingface_hub import ModelCard

    if not trainer.is_world_process_zero():
        return
    output_dir = str(trainer.plan.checkpoint.output_dir)
    path = os.path.join(output_dir, "README.md")
    from_peft = False
    if os.path.exists(path):
        existing = ModelCard.load(path).data
        from_peft = existing.get("library_name") == "peft"
        if tags is not None and existing.tags is not None:
            tags = as_list(tags)
            tags += [tag for tag in existing.tags if tag not in tags]
    summary = run_summary(
        trainer,
        language=language,
        license=license,
        tags=tags,
        model_name=model_name,
        finetuned_from=finetuned_from,
        tasks=tasks,
        dataset_tags=dataset_tags,
        dataset=dataset,
        dataset_args=dataset_args,
    )
    rows, summary["eval_results"] = results_of(trainer.state.log_history)
    header = yaml.dump(_metadata(summary), sort_keys=False)
    os.makedirs(output_dir, exist_ok=True)
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(f"---\n{header}---\n{_body(summary, hyperparameters_of(trainer.args), rows)}")
    if from_peft:
        trainer.accelerator.unwrap_model(trainer.model).create_or_update_model_card(output_dir)
