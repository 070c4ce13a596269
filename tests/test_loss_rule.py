"""``hf_lightning.loss_rule``: what a model's own loss does is found from its behaviour (docs/training.md)."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pytest
import torch
from torch import nn

from hf_lightning.loss_rule import cached_loss_rule, forget_loss_rule, probe_loss_rule, registry_shifts_labels
from tests.tiny import tiny_gpt2

DOC = Path(__file__).resolve().parents[1] / "docs" / "training.md"


class Toy(nn.Module):
    """Logits from an embedding; the loss is the cross-entropy reduced as asked (``how``)."""

    def __init__(self, how: str, shift: bool = False, dropout: float = 0.0) -> None:
        super().__init__()
        self.how, self.shift = how, shift
        self.embed = nn.Embedding(16, 8)
        self.head = nn.Linear(8, 16)
        self.drop = nn.Dropout(dropout)
        self.calls = 0

    def forward(self, input_ids, labels=None, **kwargs):
        self.calls += 1
        logits = self.head(self.drop(self.embed(input_ids)))
        if labels is None:
            return {"logits": logits}
        scores, targets = (logits[:, :-1], labels[:, 1:]) if self.shift else (logits, labels)
        flat = nn.functional.cross_entropy(scores.reshape(-1, 16), targets.reshape(-1), reduction="none")
        keep = targets.reshape(-1).ne(-100)
        total = flat[keep].sum()
        if self.how == "count":
            loss = total / kwargs.get("num_items_in_batch", keep.sum())
        elif self.how == "count+aux":  # an MoE's: the divided sum plus a term without the count
            loss = (
                total / kwargs.get("num_items_in_batch", keep.sum()) + 0.01 * self.head.weight.square().sum()
            )
        elif self.how == "mean":
            loss = total / keep.sum()
        elif self.how == "sum":
            loss = total
        else:  # a per-row mean, then the batch mean (neither a mean over items nor a sum)
            per_row = (flat * keep).view(labels.shape[0], -1).sum(-1) / keep.view(labels.shape[0], -1).sum(-1)
            loss = per_row.mean() * 0.5 + (flat[keep] ** 2).mean()
        return {"loss": loss, "logits": logits}


def _batch(rows: int = 4) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 16, (rows, 6), generator=g)
    labels = ids.clone()
    labels[0, :3] = -100
    return {"input_ids": ids, "labels": labels}


@pytest.mark.parametrize("how", ["count", "mean", "sum"])
@pytest.mark.parametrize("shift", [False, True])
def test_the_reduction_and_the_shift_are_what_the_loss_does(how, shift):
    """A custom model (no loss_type: the registry is silent) is probed for its reduction and its shift."""
    rule = probe_loss_rule(Toy(how, shift), _batch(), accepts_loss_kwargs=True)
    assert (rule.reduction, rule.shift_labels, rule.shift_known) == (how, shift, True)


@pytest.mark.parametrize("how", ["count", "mean", "sum"])
def test_a_cross_entropy_loss_is_told_in_one_forward(how):
    """The count given to the probe's forward is none a mean over the batch divides by: the loss compared with
    its logits' cross-entropy answers at once (the probe's cost is one forward without gradients)."""
    model = Toy(how, shift=True)
    rule = probe_loss_rule(model, _batch(), accepts_loss_kwargs=True)
    assert (rule.reduction, rule.shift_labels, model.calls) == (how, True, 1)


def test_a_divided_loss_with_a_term_of_its_own_is_told_by_a_second_forward():
    """An MoE-like loss (the divided sum plus an auxiliary term) matches no cross-entropy reading: a second
    forward with another count shows that it divides by the count."""
    model = Toy("count+aux")
    rule = probe_loss_rule(model, _batch(), accepts_loss_kwargs=True)
    assert (rule.reduction, rule.shift_labels, model.calls) == ("count", False, 2)


def test_a_loss_of_no_known_form_is_assumed_to_use_the_count_with_a_warning(caplog):
    """Neither a divide-by-count, a mean over items nor a sum: transformers' reading, and a warning."""
    torch.manual_seed(0)  # on some weights (5 seeds in 60) the two halves' row means agree within 1e-4
    with caplog.at_level(logging.WARNING, logger="hf_lightning.loss_rule"):
        rule = probe_loss_rule(Toy("other"), _batch(), accepts_loss_kwargs=True)
    assert rule.reduction == "unknown" and rule.passes_count
    assert "could not tell from Toy's loss whether it divides by `num_items_in_batch`" in caplog.text


def test_the_probe_changes_no_random_state_and_no_mode():
    """Dropout model in training mode: the RNG stream and every module's mode are as before the probe."""
    model = Toy("count", dropout=0.5).train()
    model.head.eval()  # a submodule the user froze in eval mode stays so
    torch.manual_seed(3)
    probe_loss_rule(model, _batch(), accepts_loss_kwargs=True)
    after = torch.rand(3)
    torch.manual_seed(3)
    assert torch.equal(after, torch.rand(3))
    assert model.training and model.drop.training and not model.head.training


def test_the_probe_runs_once_per_model():
    """The answer is cached per model object: a second call runs no forward."""
    model = Toy("mean")
    first = probe_loss_rule(model, _batch(), accepts_loss_kwargs=True)
    calls = model.calls
    assert probe_loss_rule(model, _batch(), accepts_loss_kwargs=True) is first and model.calls == calls
    assert cached_loss_rule(model) is first
    forget_loss_rule(model)
    assert cached_loss_rule(model) is None


def test_a_loss_on_other_shapes_than_its_logits_is_told_by_its_halves():
    """A sum that is not the logits' cross-entropy (a CTC-like loss) is found by halving the batch."""

    class Summing(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.ones(()))

        def forward(self, values, labels=None, **kwargs):
            per_row = ((values * self.w).sum(-1) - labels.float().sum(-1)) ** 2
            return {"loss": per_row.sum(), "logits": values}

    batch = {"values": torch.randn(4, 5), "labels": torch.randint(0, 3, (4, 2))}
    assert probe_loss_rule(Summing(), batch, accepts_loss_kwargs=True).reduction == "sum"


def test_gpt2_has_no_loss_type_and_is_found_to_shift():
    """transformers' registry is silent on GPT-2 (divergence 1): the probe finds the shift from its loss."""
    model = tiny_gpt2(dropout=0.0)
    assert registry_shifts_labels(model) is None
    ids = torch.randint(0, 256, (2, 8))
    rule = probe_loss_rule(model, {"input_ids": ids, "labels": ids}, accepts_loss_kwargs=True)
    assert (rule.reduction, rule.shift_labels) == ("count", True)


def test_decoder_only_conditional_generation_shifts_by_the_registry():
    """Llava's loss type is ForConditionalGeneration: transformers' registry says it shifts (no encoder-decoder)."""
    from tests.parity.zoo_models import row

    assert registry_shifts_labels(row("llava").build()) is True
    assert registry_shifts_labels(row("t5").build()) is False  # an encoder-decoder does not


def test_the_docs_example_runs():
    """docs/training.md's loss-rule example runs as written."""
    section = DOC.read_text().split("## The loss rule", 1)[1]
    block = re.findall(r"```python\n(.*?)```", section, flags=re.S)[0]
    exec(compile(block, "docs/training.md[loss rule]", "exec"), {"__name__": "__main__"})


def test_qwen2_vl_shifts_by_the_registry():
    """Qwen2-VL (a decoder-only vision-language model, loss type ForConditionalGeneration) shifts its labels."""
    from transformers import Qwen2VLConfig, Qwen2VLForConditionalGeneration

    text = dict(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        vocab_size=96,
        rope_scaling={"type": "mrope", "mrope_section": [2, 2, 4]},
    )
    vision = dict(
        depth=1,
        embed_dim=32,
        hidden_size=32,
        num_heads=2,
        patch_size=2,
        spatial_merge_size=1,
        temporal_patch_size=1,
        in_channels=3,
    )
    model = Qwen2VLForConditionalGeneration(Qwen2VLConfig(text_config=text, vision_config=vision))
    assert model.loss_type == "ForConditionalGeneration" and registry_shifts_labels(model) is True


class Detector(nn.Module):
    """A loss over labels given as a list of per-image dicts (DETR's form): nothing to count."""

    def __init__(self) -> None:
        super().__init__()
        self.head = nn.Linear(4, 2)

    def forward(self, pixel_values, labels=None, **kwargs):
        boxes = self.head(pixel_values)
        loss = sum(((b - t["boxes"]) ** 2).mean() for b, t in zip(boxes, labels)) * 0.7 + boxes.abs().mean()
        return {"loss": loss, "logits": boxes}


def test_labels_that_cannot_be_counted_bring_no_warning_about_the_count(caplog):
    """With labels that are not one tensor no count is passed (the loss is divided by the steps, as in
    transformers), so nothing is assumed about the count and nothing is warned."""
    torch.manual_seed(0)
    batch = {"pixel_values": torch.randn(2, 4), "labels": [{"boxes": torch.randn(2)} for _ in range(2)]}
    with caplog.at_level(logging.WARNING, logger="hf_lightning.loss_rule"):
        probe_loss_rule(Detector(), batch, accepts_loss_kwargs=True)
    assert "num_items_in_batch" not in caplog.text


def test_a_model_that_raises_brings_no_warning_about_assumptions(caplog):
    """A batch the model cannot take (a wrong key): the real forward raises right after the probe, so the probe
    warns about nothing and keeps no answer; a model that raises only under the probe is assumed the second time."""
    model = tiny_gpt2()

    def wrong():
        return {"inputs": torch.ones(2, 4, dtype=torch.long), "labels": torch.ones(2, 4, dtype=torch.long)}

    batch = wrong()
    with caplog.at_level(logging.WARNING, logger="hf_lightning.loss_rule"):
        first = probe_loss_rule(model, batch, accepts_loss_kwargs=True)
        probe_loss_rule(
            model, dict(batch), accepts_loss_kwargs=True
        )  # the step asks again for the same batch
    assert first.reduction == "unknown" and caplog.text == ""
    assert cached_loss_rule(model) is None
    with caplog.at_level(logging.WARNING, logger="hf_lightning.loss_rule"):  # a next batch: it trained on
        again = probe_loss_rule(model, wrong(), accepts_loss_kwargs=True)
    assert again == first and cached_loss_rule(model) == first
    assert "could not tell" in caplog.text
