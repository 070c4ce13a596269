"""The shape of transformers' ``examples/pytorch/image-classification/run_image_classification.py`` with only the
Trainer imports swapped: a ViT, an ``imagefolder`` dataset of generated PNGs read by ``datasets``,
``remove_unused_columns=False``, the script's own collator, an evaluation and a checkpoint each epoch and
``load_best_model_at_end``. It runs to the end (final model, metrics files, model card) as with transformers.

The script's torchvision transforms are replaced by PIL and numpy ones (torchvision is not installed here), the same
for both libraries and without randomness (the script's random crops and flips would draw from each library's
generator at other points)."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import torch

from tests.parity._run import BASE_ARGS

CLASSES = ("cat", "dog", "fox")
OUR_EXTRA_FILES = {"checkpoint-manifest.json", "training_args.json"}  # docs/checkpointing.md


def _image_folder(root) -> str:
    """8 PNGs per class, 20x20 RGB, each class with its own colour cast (so there is something to learn)."""
    from PIL import Image

    rng = np.random.default_rng(0)
    for index, name in enumerate(CLASSES):
        os.makedirs(root / name)
        for number in range(8):
            pixels = rng.integers(0, 160, (20, 20, 3))
            pixels[..., index] += 90
            Image.fromarray(pixels.astype(np.uint8)).save(root / name / f"{number}.png")
    return str(root)


def _script(lib, data_dir: str, output_dir: str, cache_dir: str):
    """run_image_classification.py's main() for a tiny ViT, with ``lib``'s Trainer and TrainingArguments."""
    from datasets import load_dataset
    from transformers import ViTConfig, ViTForImageClassification, ViTImageProcessor

    dataset = load_dataset("imagefolder", data_dir=data_dir, cache_dir=cache_dir)
    split = dataset["train"].train_test_split(0.25, seed=0)
    labels = dataset["train"].features["label"].names
    label2id = {label: str(i) for i, label in enumerate(labels)}
    id2label = {str(i): label for i, label in enumerate(labels)}
    config = ViTConfig(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64, image_size=16,
        patch_size=8, num_labels=len(labels), label2id=label2id, id2label=id2label,
        finetuning_task="image-classification",
    )  # fmt: skip
    torch.manual_seed(0)
    model = ViTForImageClassification(config)
    image_processor = ViTImageProcessor(size={"height": 16, "width": 16})
    mean, std = np.array(image_processor.image_mean), np.array(image_processor.image_std)

    def transform(image):  # Resize, ToTensor, Normalize (torchvision's, in PIL and numpy)
        pixels = np.asarray(image.convert("RGB").resize((16, 16)), dtype=np.float32) / 255.0
        return torch.from_numpy(((pixels - mean) / std).transpose(2, 0, 1).astype(np.float32))

    def preprocess(example_batch):
        example_batch["pixel_values"] = [transform(image) for image in example_batch["image"]]
        return example_batch

    split["train"].set_transform(preprocess)
    split["test"].set_transform(preprocess)

    def collate_fn(examples):
        pixel_values = torch.stack([example["pixel_values"] for example in examples])
        labels = torch.tensor([example["label"] for example in examples])
        return {"pixel_values": pixel_values, "labels": labels}

    def compute_metrics(p):
        return {"accuracy": float((np.argmax(p.predictions, axis=1) == p.label_ids).mean())}

    args = lib.TrainingArguments(
        output_dir=output_dir, **{**BASE_ARGS, "save_strategy": "epoch"}, remove_unused_columns=False,
        eval_strategy="epoch", load_best_model_at_end=True, num_train_epochs=4, per_device_train_batch_size=4,
        per_device_eval_batch_size=4, learning_rate=1e-2, logging_steps=1,
        metric_for_best_model="accuracy",
    )  # fmt: skip
    trainer = lib.Trainer(
        model=model, args=args, train_dataset=split["train"], eval_dataset=split["test"],
        compute_metrics=compute_metrics, processing_class=image_processor, data_collator=collate_fn,
    )  # fmt: skip
    train_result = trainer.train()
    trainer.save_model()
    trainer.log_metrics("train", train_result.metrics)
    trainer.save_metrics("train", train_result.metrics)
    trainer.save_state()
    metrics = trainer.evaluate()
    trainer.log_metrics("eval", metrics)
    trainer.save_metrics("eval", metrics)
    trainer.create_model_card(
        finetuned_from="tiny-vit", tasks="image-classification", dataset="imagefolder",
        tags=["image-classification", "vision"],
    )  # fmt: skip
    return trainer, metrics


def _without_speed(entry: dict) -> dict:
    return {
        k: v for k, v in entry.items() if not k.endswith(("_runtime", "_per_second")) and k != "total_flos"
    }


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    import transformers

    import hf_lightning

    root = tmp_path_factory.mktemp("image_classification")
    data_dir = _image_folder(root / "images")
    return {
        name: (*_script(lib, data_dir, str(root / name), str(root / "cache")), root / name)
        for name, lib in (("hf", transformers), ("ours", hf_lightning))
    }


def test_training_and_evaluations_equal_transformers(runs):
    """Every logged loss, grad norm, learning rate and per-epoch evaluation equals transformers' (1e-5); the
    evaluation after training is that of the best model (next test)."""
    hf, ours = runs["hf"][0].state.log_history[:-1], runs["ours"][0].state.log_history[:-1]
    assert "train_loss" in ours[-1] and "eval_loss" in runs["ours"][0].state.log_history[-1]
    assert [sorted(_without_speed(e)) for e in ours] == [sorted(_without_speed(e)) for e in hf]
    for theirs, mine in zip(hf, ours):
        theirs, mine = _without_speed(theirs), _without_speed(mine)
        torch.testing.assert_close(mine, theirs, rtol=1e-5, atol=1e-7)


def test_the_script_writes_the_files_transformers_writes(runs):
    """output_dir and every checkpoint hold transformers' files (our two extras in checkpoints, docs/checkpointing.md)."""
    hf_dir, ours_dir = runs["hf"][2], runs["ours"][2]
    assert set(os.listdir(ours_dir)) - {"training_args.json"} == set(os.listdir(hf_dir))
    for name in (n for n in os.listdir(hf_dir) if n.startswith("checkpoint-")):
        assert set(os.listdir(ours_dir / name)) - OUR_EXTRA_FILES == set(os.listdir(hf_dir / name))
    for name in (
        "all_results.json",
        "train_results.json",
        "eval_results.json",
        "README.md",
        "model.safetensors",
    ):
        assert (ours_dir / name).is_file(), name
    card = (ours_dir / "README.md").read_text()
    assert "image-classification" in card and "tiny-vit" in card


def test_final_model_is_the_best_checkpoint(runs):
    """load_best_model_at_end: the final model is from_pretrained(best) tensor for tensor, so the final evaluation
    is the best epoch's; transformers 5.24 ends on a hybrid of the best and the last epoch (divergence 14)."""
    from transformers import ViTForImageClassification

    trainer, metrics, out = runs["ours"]
    best = trainer.state.best_model_checkpoint
    assert os.path.basename(best) == os.path.basename(runs["hf"][0].state.best_model_checkpoint)
    assert (
        os.path.basename(best) != f"checkpoint-{trainer.state.global_step}"
    )  # the best is not the last epoch
    reference = ViTForImageClassification.from_pretrained(best).state_dict()
    for name, value in trainer.model.state_dict().items():
        assert torch.equal(value, reference[name]), name
    step = trainer.state.best_global_step
    best_eval = next(e for e in trainer.state.log_history if "eval_loss" in e and e["step"] == step)
    torch.testing.assert_close(metrics["eval_loss"], best_eval["eval_loss"], rtol=1e-6, atol=0)
    hf_metrics = runs["hf"][1]
    assert abs(hf_metrics["eval_loss"] - best_eval["eval_loss"]) > 1e-4  # the hybrid evaluates otherwise
    with open(out / "eval_results.json") as handle:
        assert json.load(handle)["eval_loss"] == metrics["eval_loss"]
