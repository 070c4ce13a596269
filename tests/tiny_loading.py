"""Tiny models whose checkpoints load through a conversion (transformers 5's key conversions, PEFT adapters),
and the data they train on; built from configs, offline."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

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

VOCAB = 128
IMAGE_TOKEN = 127


def _vit() -> nn.Module:
    from transformers import ViTConfig, ViTForImageClassification

    config = ViTConfig(
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        image_size=16,
        patch_size=8,
        num_labels=3,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    return ViTForImageClassification(config)


def _mixtral() -> nn.Module:
    from transformers import MixtralConfig, MixtralForCausalLM

    config = MixtralConfig(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=VOCAB,
        num_local_experts=4,
        num_experts_per_tok=2,
    )
    return MixtralForCausalLM(config)


def _qwen2_moe() -> nn.Module:
    from transformers import Qwen2MoeConfig, Qwen2MoeForCausalLM

    config = Qwen2MoeConfig(
        hidden_size=32,
        intermediate_size=64,
        moe_intermediate_size=32,
        shared_expert_intermediate_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=VOCAB,
        num_experts=4,
        num_experts_per_tok=2,
    )
    return Qwen2MoeForCausalLM(config)


def _llava() -> nn.Module:
    from transformers import CLIPVisionConfig, LlamaConfig, LlavaConfig, LlavaForConditionalGeneration

    vision = CLIPVisionConfig(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        image_size=16,
        patch_size=8,
    )
    text = LlamaConfig(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=VOCAB,
    )
    config = LlavaConfig(vision_config=vision, text_config=text, image_token_index=IMAGE_TOKEN)
    return LlavaForConditionalGeneration(config)


def _gpt_neox() -> nn.Module:
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

    config = GPTNeoXConfig(
        hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, vocab_size=VOCAB
    )
    return GPTNeoXForCausalLM(config)


CONVERTED: dict[str, Callable[[], nn.Module]] = {
    "vit": _vit,
    "mixtral": _mixtral,
    "qwen2_moe": _qwen2_moe,
    "llava": _llava,
    "gpt_neox": _gpt_neox,
}
"""Model types whose saved keys transformers 5 converts in ``from_pretrained`` (renames, merged experts, VLM prefixes)."""


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
    """Token rows that start with the 4 image tokens one 16x16 image with 8x8 patches fills, and the image."""
    rows = token_data(n, seed=seed)
    g = torch.Generator().manual_seed(seed + 1)
    for row in rows:
        row["input_ids"][:4] = IMAGE_TOKEN
        row["labels"][:4] = -100
        row["pixel_values"] = torch.randn(3, 16, 16, generator=g)
    return rows


def batch_for(kind: str) -> Callable[..., list[dict[str, torch.Tensor]]]:
    """The data a converted model of ``kind`` trains on."""
    return {"vit": image_data, "llava": llava_data}.get(kind, token_data)


def tiny_llama(seed: int = 0, tie: bool = False) -> nn.Module:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=64,
        vocab_size=VOCAB,
        tie_word_embeddings=tie,
    )
    return LlamaForCausalLM(config)


def tiny_bert_classifier(seed: int = 0) -> nn.Module:
    from transformers import BertConfig, BertForSequenceClassification

    torch.manual_seed(seed)
    config = BertConfig(
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        vocab_size=VOCAB,
        max_position_embeddings=64,
        num_labels=2,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    return BertForSequenceClassification(config)


def _peft_config(kind: str):
    import peft

    if kind == "lora":
        return peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM")
    if kind == "lora_bert":
        return peft.LoraConfig(r=4, lora_alpha=8, target_modules=["query", "value"], task_type="SEQ_CLS")
    if kind == "prompt":
        return peft.PromptTuningConfig(num_virtual_tokens=4, task_type="CAUSAL_LM")
    if kind == "ia3":
        return peft.IA3Config(
            target_modules=["k_proj", "v_proj", "down_proj"],
            feedforward_modules=["down_proj"],
            task_type="CAUSAL_LM",
        )
    raise ValueError(kind)


PEFT_KINDS = ("lora", "lora_bert", "prompt", "ia3")
"""LoRA on a decoder (tiny Llama) and on an encoder (tiny BERT sequence classification), prompt tuning, IA3."""


def peft_model(kind: str, seed: int = 0, base_seed: int = 0) -> nn.Module:
    """A ``PeftModel`` of ``kind`` over a tiny base built from ``base_seed``; ``seed`` draws the adapter."""
    import peft

    base = tiny_bert_classifier(base_seed) if kind == "lora_bert" else tiny_llama(base_seed)
    torch.manual_seed(seed)
    return peft.get_peft_model(base, _peft_config(kind))


def peft_data(kind: str, n: int = 16, seed: int = 0) -> list[dict[str, torch.Tensor]]:
    """Rows for a ``PeftModel`` of ``kind``: token rows, class labels for the BERT classifier."""
    rows = token_data(n, seed=seed)
    if kind == "lora_bert":
        for index, row in enumerate(rows):
            row["labels"] = torch.tensor(index % 2)
    return rows
