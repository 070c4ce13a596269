"""transformers 5's key conversions applied to a checkpoint's weights: what the model class's ``from_pretrained`` loads.

transformers 5 keeps some models' weights on disk under other names than their modules have:
``save_pretrained`` reverts the model's conversion mapping (ViT's ``attention.attention.query`` for
``attention.q_proj``, Mixtral's per-expert ``w1``/``w2``/``w3`` for the merged ``gate_up_proj`` and
``down_proj``, Llava's ``language_model.model.*`` for ``model.language_model.*``, GPT-NeoX's ``embed_out``
for ``lm_head``, …), and ``from_pretrained`` converts them back. :func:`to_model_state` runs that
conversion on a state dict read from a checkpoint folder, with transformers' own machinery: the mapping
``get_model_conversion_mapping(model)`` gives ``from_pretrained`` (each sub-model's, the legacy renames),
``rename_source_key`` (which also adds or strips the base-model prefix) and each transform's ``convert``
(merged, split and permuted tensors). These are the steps of transformers'
``convert_and_load_state_dict_in_model`` without its last one, which puts each result in with ``setattr``
(a new ``Parameter``: an optimizer or a ``DistributedDataParallel`` wrapper holding the old one would lose
track of it). The caller copies the converted tensors into the existing parameters instead.

Only a ``PreTrainedModel`` is converted: its ``save_pretrained`` is what reverted the names. transformers is
never imported here: a model can only be one when the program already imported transformers.
"""

from __future__ import annotations

import copy
import sys
from collections.abc import Mapping
from typing import Any, cast

import torch
from torch import nn

from hf_lightning.checkpoint.io import CheckpointError

__all__ = ["is_pretrained_model", "to_model_state"]


def is_pretrained_model(model: nn.Module) -> bool:
    """Whether ``model`` is a transformers ``PreTrainedModel`` (``False`` when transformers is not imported)."""
    modeling = sys.modules.get("transformers.modeling_utils")
    pretrained = getattr(modeling, "PreTrainedModel", None)
    return isinstance(pretrained, type) and isinstance(model, pretrained)


def _split(mapping: list[Any]) -> tuple[list[Any], list[Any]]:
    from transformers.core_model_loading import WeightConverter, WeightRenaming  # noqa: PLC0415

    renamings = [entry for entry in mapping if isinstance(entry, WeightRenaming)]
    converters = [entry for entry in mapping if isinstance(entry, WeightConverter)]
    return renamings, converters


def _collect(
    model: nn.Module, state_dict: Mapping[str, torch.Tensor]
) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """Each checkpoint tensor handed to the transform that produces its model key, as
    ``convert_and_load_state_dict_in_model`` does; keys no model key comes from are returned apart."""
    from transformers.conversion_mapping import get_model_conversion_mapping  # noqa: PLC0415
    from transformers.core_model_loading import WeightRenaming, dot_natural_key, rename_source_key  # noqa: PLC0415

    renamings, converters = _split(get_model_conversion_mapping(cast(Any, model)))
    by_pattern = {pattern: converter for converter in converters for pattern in converter.source_patterns}
    expected = model.state_dict()
    prefix = getattr(model, "base_model_prefix", "")
    prefix = prefix if isinstance(prefix, str) else ""
    pending: dict[str, Any] = {}
    unmatched: dict[str, torch.Tensor] = {}
    for key, tensor in sorted(state_dict.items(), key=lambda item: dot_natural_key(item[0])):
        renamed, pattern = rename_source_key(key, renamings, converters, prefix, expected)
        if renamed not in expected and key in expected:  # not to be renamed, at most given the prefix
            renamed, pattern = rename_source_key(key, [], [], prefix, expected)
        if renamed not in expected:
            unmatched[renamed] = tensor
            continue
        if pattern is not None:
            transform = pending.setdefault(renamed, copy.deepcopy(by_pattern[pattern]))
        else:
            transform = pending.setdefault(renamed, WeightRenaming(key, renamed))
            pattern = key
        transform.add_tensor(renamed, key, pattern, tensor)
    return pending, unmatched


def to_model_state(
    model: nn.Module, state_dict: Mapping[str, torch.Tensor], source: str
) -> dict[str, torch.Tensor]:
    """``state_dict`` (as read from ``source``) under ``model``'s own keys, converted as ``from_pretrained`` converts it.

    A key that no model key comes from is kept under its (renamed) name, so the caller's strict check
    reports it as unexpected. Any other model, or a model without conversions, gets ``state_dict`` back.

    Raises:
        CheckpointError: a conversion failed (say, experts of other shapes than the model's), naming ``source``.
    """
    if not is_pretrained_model(model):
        return dict(state_dict)
    pending, converted = _collect(model, state_dict)
    config = getattr(model, "config", None)
    for first_key, transform in pending.items():
        try:
            produced = transform.convert(first_key, model=model, config=config)
        except Exception as exc:  # transformers' operations raise what torch raises
            raise CheckpointError(
                f"The weights in `{source}` could not be converted into {type(model).__name__}'s `{first_key}` "
                f"as its `from_pretrained` converts them: {type(exc).__name__}: {exc}",
                source,
            ) from exc
        for name, tensor in produced.items():
            converted[name] = tensor[0] if isinstance(tensor, list) else tensor
    return converted
