"""Align the model's special token ids with its tokenizer before training (transformers' Trainer does).

A tokenizer built or extended for fine-tuning may define its own PAD/BOS/EOS tokens. Before training,
``model.config`` (its text config) and ``model.generation_config`` take the tokenizer's ids, so that the
saved model loads without warnings and ``generate()`` stops at the tokenizer's EOS. Rules, as in
transformers 5.24:

- only ids the tokenizer defines are propagated (``None`` leaves the config's value alone);
- EOS may be several ids: a list in the config, and the generation config's stop ids, keep the ids they
  hold, with the tokenizer's first;
- one warning lists every id that changed.

Engine-free and transformers-free: a tokenizer is recognised by its ``*_token_id`` attributes, a
processor by its ``tokenizer`` attribute.
"""

from __future__ import annotations

from typing import Any

from hf_lightning.utils.logging import get_logger

__all__ = ["align_special_tokens", "tokenizer_of"]

logger = get_logger("hf_lightning.trainer_utils")

_TOKENS = ("eos_token_id", "bos_token_id", "pad_token_id")


def tokenizer_of(processing_class: Any) -> Any:
    """The tokenizer inside ``processing_class`` (a tokenizer, or a processor holding one), else ``None``."""
    candidate = getattr(processing_class, "tokenizer", processing_class)
    if candidate is None or not all(hasattr(candidate, name) for name in _TOKENS):
        return None
    return candidate


def align_special_tokens(model: Any, processing_class: Any) -> dict[str, Any]:
    """Give ``model``'s configs the tokenizer's PAD/BOS/EOS ids; returns (and logs) the ids that changed."""
    tokenizer = tokenizer_of(processing_class)
    config = getattr(model, "config", None)
    if tokenizer is None or config is None:
        return {}
    text_config = config.get_text_config() if hasattr(config, "get_text_config") else config
    generation_config = getattr(model, "generation_config", None)
    updated: dict[str, Any] = {}
    for name in _TOKENS:
        _align_one(name, tokenizer, text_config, generation_config, updated, several=name == "eos_token_id")
    if updated:
        logger.warning(
            "The tokenizer has new PAD/BOS/EOS tokens that differ from the model config and generation config. "
            "The model config and generation config were aligned accordingly, being updated with the "
            f"tokenizer's values. Updated tokens: {updated}."
        )
    return updated


def _as_list(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list) else [value]


def _align_one(name: str, tokenizer: Any, config: Any, generation: Any, updated: dict, several: bool) -> None:
    token = getattr(tokenizer, name)
    if token is None:
        return
    config_value = getattr(config, name, None)
    config_ids = _as_list(config_value)
    generation_ids = _as_list(getattr(generation, name, None)) if generation is not None else []
    if token in config_ids and (generation is None or token in generation_ids):
        return
    updated[name] = token
    if several and isinstance(config_value, list):
        setattr(config, name, [token, *(t for t in config_ids if t != token)])
    else:
        setattr(config, name, token)
    if generation is None:
        return
    if several:
        setattr(generation, name, [token, *(t for t in generation_ids if t is not None and t != token)])
    else:
        setattr(generation, name, token)
