"""Tiny models whose checkpoints load through a conversion (transformers 5's key conversions, PEFT adapters),
and the data they train on; built from configs, offline."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from tests.parity import zoo_models as zoo

__all__ = [
    "CONVERTED",
    "PEFT_KINDS",
    "batch_for",
    "converted_model",
    "image_data",
    "llava_data",
    "peft_data",
    "peft_model",
    "tiny_bert_classifier",
    "tiny_llama",
    "token_data",
]

VOCAB = zoo.VOCAB
IMAGE_TOKEN = zoo.LLAVA_IMAGE_TOKEN
IMAGE_SIZE = 8
"""The side of the tiny Llava's images: 4 patches of 4x4, so 4 image tokens."""


CONVERTED: dict[str, Callable[[], nn.Module]] = {
    "vit": lambda: zoo.vision("ViT"),
    "mixtral": lambda: zoo.moe("Mixtral"),
    "qwen2_moe": lambda: zoo.moe("Qwen2Moe"),
    "llava": zoo.llava,
    "gpt_neox": zoo.neox,
}
"""Model types whose saved keys transformers 5 converts in ``from_pretrained`` (renames, merged experts, VLM
prefixes): the zoo's tiny builders (``tests/parity/zoo_models.py``)."""


def converted_model(kind: str, seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return CONVERTED[kind]()


def token_data(n: int = 16, seq_len: int = 12, seed: int = 0) -> list[dict[str, torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    rows = []
    for _ in range(n):
        ids = torch.randint(0, IMAGE_TOKEN, (seq_len,), generator=g)
        rows.append({"input_ids": ids, "labels": ids.clone()})
    return rows


def image_data(n: int = 16, seed: int = 0, labels: int = 3) -> list[dict[str, torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    return [
        {"pixel_values": torch.randn(3, 16, 16, generator=g), "labels": torch.tensor(i % labels)}
        for i in range(n)
    ]


def llava_data(n: int = 16, seed: int = 0) -> list[dict[str, torch.Tensor]]:
    """Token rows that start with the 4 image tokens one image of 4x4 patches fills, and the image."""
    rows = token_data(n, seed=seed)
    g = torch.Generator().manual_seed(seed + 1)
    for row in rows:
        row["input_ids"][:4] = IMAGE_TOKEN
        row["labels"][:4] = -100
        row["pixel_values"] = torch.randn(3, IMAGE_SIZE, IMAGE_SIZE, generator=g)
    return rows


def batch_for(kind: str) -> Callable[..., list[dict[str, torch.Tensor]]]:
    """The data a converted model of ``kind`` trains on."""
    return {"vit": image_data, "llava": llava_data}.get(kind, token_data)


def tiny_llama(seed: int = 0, tie: bool = False) -> nn.Module:
    from transformers import LlamaForCausalLM

    torch.manual_seed(seed)
    return LlamaForCausalLM(zoo.llama_like("Llama", tie_word_embeddings=tie))


def tiny_bert_classifier(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return zoo.bert_like("Bert", "SequenceClassification")


PEFT_KINDS = ("lora", "lora_bert", "prompt", "ia3")
"""LoRA on a decoder (tiny Llama) and on an encoder (tiny BERT sequence classification), prompt tuning, IA3."""


def peft_model(kind: str, seed: int = 0, base_seed: int = 0) -> nn.Module:
    """A ``PeftModel`` of ``kind`` over a tiny base built from ``base_seed``; ``seed`` draws the adapter."""
    import peft

    base = tiny_bert_classifier(base_seed) if kind == "lora_bert" else tiny_llama(base_seed)
    torch.manual_seed(seed)
    return peft.get_peft_model(base, zoo.peft_config("lora-encoder" if kind == "lora_bert" else kind))


def peft_data(kind: str, n: int = 16, seed: int = 0) -> list[dict[str, torch.Tensor]]:
    """Rows for a ``PeftModel`` of ``kind``: token rows, class labels for the BERT classifier."""
    rows = token_data(n, seed=seed)
    if kind == "lora_bert":
        for index, row in enumerate(rows):
            row["labels"] = torch.tensor(index % 2)
    return rows
