"""Tiny architectures of every head family, built from configs, and data for each (offline).

A :class:`ZooRow` names a model, how to build it (seeded, dropout off), how to make its rows and
collate them, its head family, and the oracle transformers needs where its own loss is off by the
accumulation factor: ``oracle`` is a ``compute_loss_func(outputs, labels, num_items_in_batch)`` that
divides the summed loss by ``num_items_in_batch`` (or keeps a sum), which is what the model's loss
means for the big batch. Used by ``test_model_zoo.py`` and ``test_ga_invariance.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

__all__ = [
    "ROWS",
    "ZooRow",
    "bert_like",
    "collate",
    "freeze_batch_norm",
    "llama_like",
    "llava",
    "moe",
    "neox",
    "peft_config",
    "row",
    "vision",
]

VOCAB, SEQ = 96, 10


@dataclass(frozen=True)
class ZooRow:
    """One architecture of the zoo (see the module docstring)."""

    name: str
    build: Callable[[], nn.Module]
    data: Callable[[int, int], list[dict[str, Any]]]  # (rows, seed) -> examples
    family: str
    oracle: Callable[..., torch.Tensor] | None = None  # transformers' compute_loss_func, where it needs one
    collator: Callable[[list[dict[str, Any]]], dict[str, Any]] | None = None
    peft: Callable[[], nn.Module] | None = None  # a PeftModel's fresh base model (checkpoints hold adapters)
    args: dict[str, Any] = field(default_factory=dict)  # extra TrainingArguments (bf16, checkpointing)
    batch_norm: bool = False  # BatchNorm layers: batch statistics differ between batch sizes
    ignore_keys: list[str] | None = (
        None  # outputs left out of predictions (both trainers fail to gather them)
    )


def _t():
    import transformers

    return transformers


def _seeded(build: Callable[[], nn.Module]) -> Callable[[], nn.Module]:
    def seeded() -> nn.Module:
        torch.manual_seed(0)
        return build()

    return seeded


# --- configs ----------------------------------------------------------------------------------
def llama_like(name: str, **extra: Any) -> Any:
    config_class = getattr(_t(), f"{name}Config")
    kwargs = dict(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=VOCAB,
        max_position_embeddings=64,
        pad_token_id=0,
    )
    if name == "Gemma":
        kwargs["head_dim"] = 8
    return config_class(**{**kwargs, **extra})


def _gpt2() -> nn.Module:
    t = _t()
    config = t.GPT2Config(
        n_layer=2,
        n_embd=32,
        n_head=2,
        vocab_size=VOCAB,
        n_positions=64,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        bos_token_id=1,
        eos_token_id=2,
    )
    model = t.GPT2LMHeadModel(config)
    model.loss_type = "ForCausalLM"  # transformers then shifts the count too (docs/divergences.md, 1)
    return model


def neox() -> nn.Module:
    t = _t()
    config = t.GPTNeoXConfig(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        vocab_size=VOCAB,
        max_position_embeddings=64,
        hidden_dropout=0.0,
        attention_dropout=0.0,
    )
    return t.GPTNeoXForCausalLM(config)


def moe(name: str) -> nn.Module:
    t = _t()
    if name == "Mixtral":
        config = llama_like("Mixtral", num_local_experts=4, num_experts_per_tok=2, output_router_logits=True)
        return t.MixtralForCausalLM(config)
    config = llama_like(
        "Qwen2Moe",
        num_experts=4,
        num_experts_per_tok=2,
        moe_intermediate_size=32,
        shared_expert_intermediate_size=32,
        output_router_logits=True,
        decoder_sparse_step=1,
    )
    return t.Qwen2MoeForCausalLM(config)


def bert_like(name: str, head: str) -> nn.Module:
    t = _t()
    common = dict(vocab_size=VOCAB, num_labels=3, max_position_embeddings=64, pad_token_id=0)
    if name == "DistilBert":
        config = t.DistilBertConfig(
            dim=32,
            hidden_dim=64,
            n_layers=2,
            n_heads=2,
            dropout=0.0,
            attention_dropout=0.0,
            seq_classif_dropout=0.0,
            **common,
        )
    else:
        config = getattr(t, f"{name}Config")(
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=2,
            hidden_dropout_prob=0.0,
            attention_probs_dropout_prob=0.0,
            **common,
        )
    return getattr(t, f"{name}For{head}")(config)


def _t5() -> nn.Module:
    t = _t()
    config = t.T5Config(
        vocab_size=VOCAB,
        d_model=32,
        d_kv=8,
        d_ff=64,
        num_layers=2,
        num_heads=4,
        dropout_rate=0.0,
        decoder_start_token_id=0,
        pad_token_id=0,
    )
    return t.T5ForConditionalGeneration(config)


def _bart() -> nn.Module:
    t = _t()
    config = t.BartConfig(
        vocab_size=VOCAB,
        d_model=32,
        encoder_layers=1,
        decoder_layers=1,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        max_position_embeddings=64,
        dropout=0.0,
        attention_dropout=0.0,
        activation_dropout=0.0,
        pad_token_id=1,
        bos_token_id=0,
        eos_token_id=2,
        decoder_start_token_id=2,
        forced_eos_token_id=None,
    )
    return t.BartForConditionalGeneration(config)


def _whisper() -> nn.Module:
    t = _t()
    config = t.WhisperConfig(
        vocab_size=VOCAB,
        num_mel_bins=8,
        d_model=32,
        encoder_layers=1,
        decoder_layers=1,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        max_source_positions=16,
        max_target_positions=32,
        dropout=0.0,
        attention_dropout=0.0,
        activation_dropout=0.0,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
        decoder_start_token_id=1,
        suppress_tokens=None,
        begin_suppress_tokens=None,
    )
    return t.WhisperForConditionalGeneration(config)


def vision(name: str) -> nn.Module:
    t = _t()
    common = dict(num_labels=3, num_channels=3)
    if name == "ViT":
        config = t.ViTConfig(
            image_size=16,
            patch_size=4,
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=2,
            intermediate_size=64,
            hidden_dropout_prob=0.0,
            attention_probs_dropout_prob=0.0,
            **common,
        )
    elif name == "ResNet":
        config = t.ResNetConfig(embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1], **common)
    elif name == "MobileNetV2":
        config = t.MobileNetV2Config(
            image_size=16, depth_multiplier=0.25, classifier_dropout_prob=0.0, **common
        )
    elif name == "ConvNext":
        config = t.ConvNextConfig(num_stages=2, hidden_sizes=[8, 16], depths=[1, 1], image_size=16, **common)
    elif name == "RegNet":
        config = t.RegNetConfig(
            embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1], groups_width=8, **common
        )
    else:  # EfficientNet
        config = t.EfficientNetConfig(
            image_size=16,
            width_coefficient=0.25,
            depth_coefficient=0.1,
            kernel_sizes=[3, 3],
            in_channels=[16, 8],
            out_channels=[8, 16],
            depthwise_padding=[],
            strides=[1, 2],
            num_block_repeats=[1, 1],
            expand_ratios=[1, 2],
            hidden_dim=320,
            pooling_type="max",
            dropout_rate=0.0,
            drop_connect_rate=0.0,
            **common,
        )
    return getattr(t, f"{name}ForImageClassification")(config)


def _wav2vec2(head: str) -> nn.Module:
    t = _t()
    config = t.Wav2Vec2Config(
        vocab_size=12,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        conv_dim=(16, 16),
        conv_stride=(4, 4),
        conv_kernel=(8, 8),
        num_conv_pos_embeddings=8,
        num_conv_pos_embedding_groups=2,
        hidden_dropout=0.0,
        attention_dropout=0.0,
        activation_dropout=0.0,
        feat_proj_dropout=0.0,
        final_dropout=0.0,
        layerdrop=0.0,
        mask_time_prob=0.0,
        num_labels=3,
        pad_token_id=0,
        do_stable_layer_norm=True,
        feat_extract_norm="layer",
    )
    return getattr(t, f"Wav2Vec2For{head}")(config)


def _clip() -> nn.Module:
    t = _t()
    text = dict(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        max_position_embeddings=32,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
    )
    vision = dict(
        image_size=16,
        patch_size=4,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
    )
    return t.CLIPModel(t.CLIPConfig(text_config=text, vision_config=vision, projection_dim=16))


LLAVA_IMAGE_TOKEN = VOCAB - 1
LLAVA_PATCHES = 4  # (image_size / patch_size) ** 2, the CLS feature dropped


def llava() -> nn.Module:
    t = _t()
    vision = t.CLIPVisionConfig(
        image_size=8,
        patch_size=4,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        projection_dim=16,
    )
    text = llama_like("Llama")
    config = t.LlavaConfig(
        vision_config=vision,
        text_config=text,
        image_token_index=LLAVA_IMAGE_TOKEN,
        vision_feature_layer=-1,
        projector_hidden_act="gelu",
    )
    return t.LlavaForConditionalGeneration(config)


def _peft_base(kind: str) -> nn.Module:
    """The base model of a PEFT row, seeded as the row builds it (an adapter checkpoint holds no base weights)."""
    torch.manual_seed(0)
    if kind == "lora-encoder":
        return bert_like("Bert", "SequenceClassification")
    return _t().LlamaForCausalLM(llama_like("Llama"))


def peft_config(kind: str) -> Any:
    """The adapter of a PEFT row: ``lora`` (q/v of a decoder), ``lora-encoder`` (query/value of an encoder
    classifier), ``prompt`` (prompt tuning) or ``ia3``."""
    import peft

    if kind == "lora-encoder":
        return peft.LoraConfig(task_type="SEQ_CLS", r=4, lora_alpha=8, target_modules=["query", "value"])
    if kind == "lora":
        return peft.LoraConfig(task_type="CAUSAL_LM", r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"])
    if kind == "prompt":
        return peft.PromptTuningConfig(task_type="CAUSAL_LM", num_virtual_tokens=4)
    if kind == "ia3":
        return peft.IA3Config(
            task_type="CAUSAL_LM",
            target_modules=["k_proj", "v_proj", "down_proj"],
            feedforward_modules=["down_proj"],
        )
    raise ValueError(f"no PEFT row kind {kind!r}")


def _peft(kind: str) -> nn.Module:
    import peft

    return peft.get_peft_model(_peft_base(kind), peft_config(kind))


def _llama() -> nn.Module:
    return _t().LlamaForCausalLM(llama_like("Llama"))


# --- data ---------------------------------------------------------------------------------------
def _ids(g: torch.Generator, n: int = SEQ) -> torch.Tensor:
    return torch.randint(3, VOCAB - 1, (n,), generator=g)  # no pad/bos/eos, no image token


def _ragged(g: torch.Generator, labels: torch.Tensor) -> torch.Tensor:
    """``labels`` with a random number of leading positions ignored: micro-batches count unequal items."""
    labels = labels.clone()
    labels[: int(torch.randint(0, labels.shape[0] // 2, (1,), generator=g))] = -100
    return labels


def _rows(make: Callable[[torch.Generator], dict[str, Any]]) -> Callable[[int, int], list[dict[str, Any]]]:
    def rows(n: int, seed: int) -> list[dict[str, Any]]:
        g = torch.Generator().manual_seed(seed)
        return [make(g) for _ in range(n)]

    return rows


def _causal(g: torch.Generator) -> dict[str, Any]:
    ids = _ids(g)
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": _ragged(g, ids)}


def _sequence_label(g: torch.Generator) -> dict[str, Any]:
    ids = _ids(g)
    return {
        "input_ids": ids,
        "attention_mask": torch.ones_like(ids),
        "labels": torch.randint(0, 3, (), generator=g),
    }


def _token_labels(g: torch.Generator) -> dict[str, Any]:
    ids = _ids(g)
    labels = torch.randint(0, 3, ids.shape, generator=g)
    labels[torch.rand(ids.shape, generator=g) < 0.4] = -100
    labels[0] = 1  # at least one target per row
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": labels}


def _masked(g: torch.Generator) -> dict[str, Any]:
    ids = _ids(g)
    labels = torch.where(torch.rand(ids.shape, generator=g) < 0.4, ids, torch.full_like(ids, -100))
    labels[0] = ids[0]
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": labels}


def _seq2seq(g: torch.Generator) -> dict[str, Any]:
    ids = _ids(g)
    labels = _ids(g, 6)
    labels[6 - int(torch.randint(0, 3, (1,), generator=g)) :] = -100  # ragged targets, padded at the end
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": labels}


def _speech2text(g: torch.Generator) -> dict[str, Any]:
    labels = _ids(g, 6)
    labels[6 - int(torch.randint(0, 3, (1,), generator=g)) :] = -100
    return {"input_features": torch.randn(8, 32, generator=g), "labels": labels}


def _image(size: int) -> Callable[[torch.Generator], dict[str, Any]]:
    def image(g: torch.Generator) -> dict[str, Any]:
        return {
            "pixel_values": torch.randn(3, size, size, generator=g),
            "labels": torch.randint(0, 3, (), generator=g),
        }

    return image


def _ctc(g: torch.Generator) -> dict[str, Any]:
    labels = torch.randint(1, 12, (4,), generator=g)
    labels[int(torch.randint(2, 5, (1,), generator=g)) :] = -100
    return {"input_values": torch.randn(400, generator=g), "labels": labels}


def _audio_label(g: torch.Generator) -> dict[str, Any]:
    return {"input_values": torch.randn(400, generator=g), "labels": torch.randint(0, 3, (), generator=g)}


def _image_text(g: torch.Generator) -> dict[str, Any]:
    return {"input_ids": _ids(g, 8), "pixel_values": torch.randn(3, 16, 16, generator=g)}


def _llava_row(g: torch.Generator) -> dict[str, Any]:
    """A prompt token, the image's tokens, then text; the prompt token is a label too, so a count of the
    unshifted labels would be one per row too many (the shift matters)."""
    text = _ids(g, 7)
    ids = torch.cat([text[:1], torch.full((LLAVA_PATCHES,), LLAVA_IMAGE_TOKEN), text[1:]])
    labels = torch.cat([text[:1], torch.full((LLAVA_PATCHES,), -100), _ragged(g, text[1:])])
    return {
        "input_ids": ids,
        "attention_mask": torch.ones_like(ids),
        "pixel_values": torch.randn(3, 8, 8, generator=g),
        "labels": labels,
    }


def collate(features: list[dict[str, Any]]) -> dict[str, Any]:
    """Stack each field (CLIP-like rows without labels also get ``return_loss=True``)."""
    batch: dict[str, Any] = {k: torch.stack([f[k] for f in features]) for k in features[0]}
    if "labels" not in batch and "pixel_values" in batch and "input_ids" in batch:
        batch["return_loss"] = True
    return batch


def seq2seq_collator(start: int, pad: int) -> Callable[[list[dict[str, Any]]], dict[str, Any]]:
    """``collate`` plus ``decoder_input_ids`` (the labels shifted right, as ``DataCollatorForSeq2Seq`` adds
    them), so the model also runs when a ``compute_loss_func`` takes the labels away."""

    def collate_seq2seq(features: list[dict[str, Any]]) -> dict[str, Any]:
        batch = collate(features)
        labels = batch["labels"]
        decoder = torch.full_like(labels, pad)
        decoder[:, 0] = start
        decoder[:, 1:] = labels[:, :-1].masked_fill(labels[:, :-1] == -100, pad)
        batch["decoder_input_ids"] = decoder
        return batch

    return collate_seq2seq


# --- oracles: what the model's loss means for the whole accumulated batch -----------------------
def mean_oracle(outputs: Any, labels: torch.Tensor, num_items_in_batch: Any = None) -> torch.Tensor:
    """The summed cross-entropy divided by ``num_items_in_batch`` (a mean over the big batch)."""
    logits = outputs["logits"]
    total = nn.functional.cross_entropy(
        logits.reshape(-1, logits.shape[-1]).float(), labels.reshape(-1).to(logits.device), reduction="sum"
    )
    return total / (num_items_in_batch if num_items_in_batch is not None else labels.ne(-100).sum())


def ctc_sum_oracle(outputs: Any, labels: torch.Tensor, num_items_in_batch: Any = None) -> torch.Tensor:
    """Wav2Vec2's CTC loss with its default ``reduction="sum"`` (every frame of every row an input)."""
    log_probs = nn.functional.log_softmax(outputs["logits"], dim=-1, dtype=torch.float32).transpose(0, 1)
    mask = labels >= 0
    lengths = torch.full((labels.shape[0],), log_probs.shape[0], dtype=torch.long)
    with torch.backends.cudnn.flags(enabled=False):
        return nn.functional.ctc_loss(
            log_probs, labels.masked_select(mask), lengths, mask.sum(-1), blank=0, reduction="sum"
        )


# --- the zoo --------------------------------------------------------------------------------------
def freeze_batch_norm(model: nn.Module) -> nn.Module:
    """Keep every BatchNorm layer in eval mode (running statistics), whatever ``model.train()`` says."""
    for module in model.modules():
        if isinstance(module, nn.modules.batchnorm._BatchNorm):
            module.train = lambda mode=True, m=module: nn.Module.train(m, False)  # type: ignore[method-assign]
            module.eval()
    return model


def row(name: str) -> ZooRow:
    return next(r for r in ROWS if r.name == name)


_CAUSAL, _SEQ, _TOK = _rows(_causal), _rows(_sequence_label), _rows(_token_labels)
_m = _seeded

ROWS: list[ZooRow] = [
    # decoder LMs (their loss divides by num_items_in_batch, as transformers assumes)
    ZooRow("gpt2", _m(_gpt2), _CAUSAL, "causal_lm"),
    ZooRow("llama", _m(_llama), _CAUSAL, "causal_lm"),
    ZooRow("mistral", _m(lambda: _t().MistralForCausalLM(llama_like("Mistral"))), _CAUSAL, "causal_lm"),
    ZooRow("qwen2", _m(lambda: _t().Qwen2ForCausalLM(llama_like("Qwen2"))), _CAUSAL, "causal_lm"),
    ZooRow("gemma", _m(lambda: _t().GemmaForCausalLM(llama_like("Gemma"))), _CAUSAL, "causal_lm"),
    ZooRow("gpt_neox", _m(neox), _CAUSAL, "causal_lm"),
    # MoE LMs (router auxiliary loss on)
    ZooRow("mixtral", _m(lambda: moe("Mixtral")), _CAUSAL, "moe_lm"),
    ZooRow("qwen2_moe", _m(lambda: moe("Qwen2Moe")), _CAUSAL, "moe_lm"),
    # encoders: sequence and token heads (a mean over their own micro-batch)
    ZooRow("bert_seq", _m(lambda: bert_like("Bert", "SequenceClassification")), _SEQ, "seq_cls", mean_oracle),
    ZooRow(
        "bert_token", _m(lambda: bert_like("Bert", "TokenClassification")), _TOK, "token_cls", mean_oracle
    ),
    ZooRow("bert_mlm", _m(lambda: bert_like("Bert", "MaskedLM")), _rows(_masked), "masked_lm", mean_oracle),
    ZooRow(
        "roberta_seq",
        _m(lambda: bert_like("Roberta", "SequenceClassification")),
        _SEQ,
        "seq_cls",
        mean_oracle,
    ),
    ZooRow(
        "distilbert_seq",
        _m(lambda: bert_like("DistilBert", "SequenceClassification")),
        _SEQ,
        "seq_cls",
        mean_oracle,
    ),
    ZooRow(
        "llama_seq",
        _m(lambda: _t().LlamaForSequenceClassification(llama_like("Llama", num_labels=3))),
        _SEQ,
        "seq_cls",
        mean_oracle,
    ),
    ZooRow(
        "mistral_seq",
        _m(lambda: _t().MistralForSequenceClassification(llama_like("Mistral", num_labels=3))),
        _SEQ,
        "seq_cls",
        mean_oracle,
    ),
    ZooRow(
        "gemma_seq",
        _m(lambda: _t().GemmaForSequenceClassification(llama_like("Gemma", num_labels=3))),
        _SEQ,
        "seq_cls",
        mean_oracle,
    ),
    ZooRow(
        "qwen2_token",
        _m(lambda: _t().Qwen2ForTokenClassification(llama_like("Qwen2", num_labels=3))),
        _TOK,
        "token_cls",
        mean_oracle,
    ),
    ZooRow(
        "llama_token",
        _m(lambda: _t().LlamaForTokenClassification(llama_like("Llama", num_labels=3))),
        _TOK,
        "token_cls",
        mean_oracle,
    ),
    # seq2seq
    ZooRow("t5", _m(_t5), _rows(_seq2seq), "seq2seq", mean_oracle, seq2seq_collator(0, 0)),
    ZooRow("bart", _m(_bart), _rows(_seq2seq), "seq2seq", mean_oracle, seq2seq_collator(2, 1)),
    ZooRow("whisper", _m(_whisper), _rows(_speech2text), "seq2seq", mean_oracle, seq2seq_collator(1, 0)),
    # vision classification
    ZooRow("vit", _m(lambda: vision("ViT")), _rows(_image(16)), "image_cls"),
    ZooRow(
        "resnet", _m(lambda: vision("ResNet")), _rows(_image(16)), "image_cls", mean_oracle, batch_norm=True
    ),
    ZooRow(
        "mobilenet_v2",
        _m(lambda: vision("MobileNetV2")),
        _rows(_image(16)),
        "image_cls",
        mean_oracle,
        batch_norm=True,
    ),
    ZooRow("convnext", _m(lambda: vision("ConvNext")), _rows(_image(16)), "image_cls"),
    ZooRow(
        "regnet", _m(lambda: vision("RegNet")), _rows(_image(16)), "image_cls", mean_oracle, batch_norm=True
    ),
    ZooRow(
        "efficientnet",
        _m(lambda: vision("EfficientNet")),
        _rows(_image(16)),
        "image_cls",
        mean_oracle,
        batch_norm=True,
    ),
    # audio
    ZooRow("wav2vec2_ctc", _m(lambda: _wav2vec2("CTC")), _rows(_ctc), "ctc", ctc_sum_oracle),
    ZooRow(
        "wav2vec2_cls",
        _m(lambda: _wav2vec2("SequenceClassification")),
        _rows(_audio_label),
        "audio_cls",
        mean_oracle,
    ),
    # contrastive, vision-language
    ZooRow("clip", _m(_clip), _rows(_image_text), "contrastive"),
    ZooRow("llava", _m(llava), _rows(_llava_row), "vlm", ignore_keys=["cache", "image_outputs"]),
    # wrappers
    ZooRow("llama_lora", _m(lambda: _peft("lora")), _CAUSAL, "causal_lm", peft=lambda: _peft_base("lora")),
    ZooRow(
        "bert_lora",
        _m(lambda: _peft("lora-encoder")),
        _SEQ,
        "seq_cls",
        mean_oracle,
        peft=lambda: _peft_base("lora-encoder"),
    ),
    ZooRow(
        "llama_prompt_tuning",
        _m(lambda: _peft("prompt")),
        _CAUSAL,
        "causal_lm",
        peft=lambda: _peft_base("prompt"),
    ),
    ZooRow("llama_ia3", _m(lambda: _peft("ia3")), _CAUSAL, "causal_lm", peft=lambda: _peft_base("ia3")),
    ZooRow("llama_grad_ckpt", _m(_llama), _CAUSAL, "causal_lm", args={"gradient_checkpointing": True}),
    ZooRow("llama_bf16", _m(_llama), _CAUSAL, "causal_lm", args={"bf16": True}),
]
