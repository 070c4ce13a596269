"""The facts of a model card, gathered from a trainer as transformers' ``TrainingSummary`` does.

``results_of`` reads the results table and the last evaluation out of ``state.log_history``;
``run_summary`` completes what the
caller of ``create_model_card`` gave (model name, base model, task, datasets, license, tags) from
the trainer. ``hf_lightning.trainer.model_card`` writes the card from these facts.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

__all__ = ["TASK_NAMES", "as_list", "results_of", "rounded", "run_summary"]

_GENERATED_TAG = "generated_from_trainer"

# task tag -> (readable name, transformers' auto-mapping constants whose model classes do that task)
_TASKS: dict[str, tuple[str | None, tuple[str, ...]]] = {
    "text-generation": ("Causal Language Modeling", ("MODEL_FOR_CAUSAL_LM_MAPPING_NAMES",)),
    "image-classification": ("Image Classification", ("MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES",)),
    "image-segmentation": ("Image Segmentation", ("MODEL_FOR_IMAGE_SEGMENTATION_MAPPING_NAMES",)),
    "fill-mask": ("Masked Language Modeling", ("MODEL_FOR_MASKED_LM_MAPPING_NAMES",)),
    "object-detection": ("Object Detection", ("MODEL_FOR_OBJECT_DETECTION_MAPPING_NAMES",)),
    "question-answering": ("Question Answering", ("MODEL_FOR_QUESTION_ANSWERING_MAPPING_NAMES",)),
    "text2text-generation": (None, ("MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES",)),
    "text-classification": ("Text Classification", ("MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES",)),
    "table-question-answering": (
        "Table Question Answering",
        ("MODEL_FOR_TABLE_QUESTION_ANSWERING_MAPPING_NAMES",),
    ),
    "token-classification": ("Token Classification", ("MODEL_FOR_TOKEN_CLASSIFICATION_MAPPING_NAMES",)),
    "audio-classification": ("Audio Classification", ("MODEL_FOR_AUDIO_CLASSIFICATION_MAPPING_NAMES",)),
    "automatic-speech-recognition": (
        "Automatic Speech Recognition",
        ("MODEL_FOR_CTC_MAPPING_NAMES", "MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES"),
    ),
    "zero-shot-image-classification": (
        None,
        ("MODEL_FOR_ZERO_SHOT_IMAGE_CLASSIFICATION_MAPPING_NAMES",),
    ),
    "image-text-to-text": (None, ("MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES",)),
    "multiple-choice": ("Multiple Choice", ()),
    "zero-shot-classification": ("Zero Shot Classification", ()),
}
_NOT_REAL_DATASETS = ("csv", "json", "pandas", "parquet", "text")
_EVAL_TIMINGS = ("runtime", "samples_per_second", "steps_per_second")


def as_list(value: Any) -> list[Any]:
    if value is None:
        return []
    return [value] if isinstance(value, str) else list(value)


def _title(key: str) -> str:
    """``eval_matthews_correlation`` style keys as card labels: ``Matthews Correlation``."""
    return " ".join(part.capitalize() for part in key.split("_"))


def rounded(value: Any, decimals: int = 4) -> str:
    text = str(value)
    if isinstance(value, float) and "." in text and len(text.split(".")[1]) > decimals:
        return f"{value:.{decimals}f}"
    return text


# --- what the run says --------------------------------------------------------------------------
def results_of(
    log_history: list[dict[str, Any]],
) -> tuple[list[dict[str, Any]] | None, dict[str, Any] | None]:
    """The results table (one row per evaluation during training) and the last evaluation's metrics."""
    end = next((i for i, entry in enumerate(log_history) if "train_runtime" in entry), None)
    evals = [i for i, entry in enumerate(log_history) if "eval_loss" in entry]
    if end is None:
        return None, (log_history[evals[-1]] if evals else None)
    rows, training_loss = [], "No log"
    for entry in log_history[:end]:
        training_loss = entry.get("loss", training_loss)
        if "eval_loss" in entry:
            rows.append(_result_row(entry, training_loss))
    if not evals or evals[-1] == 0:
        return rows, None
    last = {}
    for key, value in log_history[evals[-1]].items():
        key = key.removeprefix("eval_")
        if key not in (*_EVAL_TIMINGS, "epoch", "step"):
            last[_title(key)] = value
    return rows, last


def _result_row(entry: dict[str, Any], training_loss: Any) -> dict[str, Any]:
    row = {"Training Loss": training_loss, "Epoch": entry.get("epoch"), "Step": entry.get("step")}
    skipped = {"total_flos", "epoch", "step", *(f"eval_{name}" for name in _EVAL_TIMINGS)}
    for key, value in entry.items():
        if key in skipped:
            continue
        row["Validation Loss" if key == "eval_loss" else _title("_".join(key.split("_")[1:]))] = value
    return row


def _infer_task(model: Any) -> str | None:
    """The task tag of the model's class in transformers' auto mappings (the last task that lists it)."""
    try:
        from transformers.models.auto import modeling_auto
    except ImportError:
        return None
    class_name, found = type(model).__name__, None
    for task, (_, constants) in _TASKS.items():
        for constant in constants:
            names = getattr(modeling_auto, constant, {}).values()
            flat = [n for value in names for n in (value if isinstance(value, (list, tuple)) else [value])]
            if class_name in flat:
                found = task
    return found


def _dataset_defaults(trainer: Any) -> dict[str, Any]:
    """Dataset tag, config and split of a Hub ``datasets.Dataset`` the trainer holds (else nothing)."""
    data = trainer.eval_dataset if trainer.eval_dataset is not None else trainer.train_dataset
    try:
        from datasets import Dataset, IterableDataset
    except ImportError:
        return {}
    if not isinstance(data, (Dataset, IterableDataset)) or data.builder_name in _NOT_REAL_DATASETS:
        return {}
    return {
        "dataset_tags": [data.builder_name],
        "dataset_args": [data.config_name],
        "dataset_metadata": [{"config": data.config_name, "split": str(data.split)}],
    }


def _license_of(model_id: str | None) -> str | None:
    """The license tag of ``model_id`` on the Hub, when online and the model is found there."""
    if not model_id:
        return None
    from huggingface_hub import HfApi, constants

    if constants.HF_HUB_OFFLINE:
        return None
    try:
        tags = HfApi().model_info(model_id).tags or []
    except Exception:  # not on the Hub, no network: the card simply has no license
        return None
    found = [tag[len("license:") :] for tag in tags if tag.startswith("license:")]
    return found[-1] if found else None


def run_summary(trainer: Any, **given: Any) -> dict[str, Any]:
    """The card's facts: what the caller gave, completed from the trainer as transformers does."""
    summary = dict(given)
    defaults = _dataset_defaults(trainer)
    for key in ("dataset_tags", "dataset_args"):
        if summary[key] is None:
            summary[key] = defaults.get(key)
    summary["dataset_metadata"] = defaults.get("dataset_metadata")
    if summary["dataset"] is None:
        summary["dataset"] = summary["dataset_tags"]
    config = getattr(trainer.model, "config", None)
    name_or_path = getattr(config, "_name_or_path", None)
    if summary["finetuned_from"] is None and name_or_path is not None and not os.path.isdir(name_or_path):
        summary["finetuned_from"] = name_or_path
    if summary["tasks"] is None:
        summary["tasks"] = _infer_task(trainer.model)
    if summary["model_name"] is None:
        summary["model_name"] = Path(str(trainer.plan.checkpoint.output_dir)).name
    if not summary["model_name"]:
        summary["model_name"] = summary["finetuned_from"]
    summary["tags"] = _with_generated_tag(summary["tags"])
    if summary["license"] is None:
        summary["license"] = _license_of(summary["finetuned_from"])
    for key in ("dataset", "dataset_tags", "dataset_args", "dataset_metadata", "tasks"):
        summary[key] = as_list(summary[key])
    return summary


def _with_generated_tag(tags: Any) -> list[Any]:
    tags = as_list(tags)
    return tags if _GENERATED_TAG in tags else [*tags, _GENERATED_TAG]


TASK_NAMES = {task: name for task, (name, _) in _TASKS.items() if name is not None}
"""Task tag -> the readable name a model-index gives it (tasks without one stay out of the index)."""
