"""``load_model_weights`` puts in what the model class's ``from_pretrained`` loads from the folder: transformers 5's
key conversions (renamed, merged and split tensors), tied weights, sharded indexes; or refuses, changing nothing."""

from __future__ import annotations

import json
import os

import pytest
import torch

from hf_lightning.checkpoint import CheckpointError, load_model_weights
from hf_lightning.checkpoint.conversion import is_pretrained_model, to_model_state
from tests.tiny import RegressionModel
from tests.tiny_loading import CONVERTED, converted_model, tiny_llama


def _state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {name: value.detach().clone() for name, value in model.state_dict().items()}


def _assert_equal(model: torch.nn.Module, reference: torch.nn.Module) -> None:
    expected = reference.state_dict()
    actual = model.state_dict()
    assert actual.keys() == expected.keys()
    for name, value in expected.items():
        assert torch.equal(actual[name], value), name


@pytest.mark.parametrize("kind", sorted(CONVERTED))
def test_saved_keys_differ_from_the_model_keys(tmp_path, kind):
    """The premise: save_pretrained writes these models under other keys than their state dicts have."""
    from safetensors import safe_open

    model = converted_model(kind)
    model.save_pretrained(tmp_path)
    with safe_open(os.path.join(tmp_path, "model.safetensors"), "pt") as handle:
        saved = set(handle.keys())
    assert saved != set(model.state_dict())


@pytest.mark.parametrize("kind", sorted(CONVERTED))
def test_converted_checkpoint_loads_every_tensor_as_from_pretrained(tmp_path, kind):
    """A fresh model loaded from the folder equals ``<Class>.from_pretrained(folder)`` tensor for tensor."""
    trained = converted_model(kind, seed=1)
    trained.save_pretrained(tmp_path)
    model = converted_model(kind, seed=2)
    result = load_model_weights(model, tmp_path)
    assert (result.missing_keys, result.unexpected_keys) == ([], [])
    _assert_equal(model, type(trained).from_pretrained(tmp_path))
    _assert_equal(model, trained)


@pytest.mark.parametrize("kind", ["mixtral", "llava"])
def test_sharded_index_of_a_converted_model_loads_whole(tmp_path, kind):
    """Shards of ``model.safetensors.index.json``, experts of one layer split over shards: every tensor loaded."""
    trained = converted_model(kind, seed=1)
    trained.save_pretrained(tmp_path, max_shard_size="20KB")
    with open(tmp_path / "model.safetensors.index.json") as handle:
        assert len(set(json.load(handle)["weight_map"].values())) > 2
    model = converted_model(kind, seed=2)
    load_model_weights(model, tmp_path)
    _assert_equal(model, trained)


def test_tied_embeddings_load_through_the_kept_name(tmp_path):
    """save_pretrained writes tied weights once; both names hold the loaded tensor, still one tensor."""
    trained = tiny_llama(seed=1, tie=True)
    trained.save_pretrained(tmp_path)
    model = tiny_llama(seed=2, tie=True)
    load_model_weights(model, tmp_path)
    _assert_equal(model, trained)
    assert model.lm_head.weight is model.model.embed_tokens.weight


def test_other_architecture_is_refused_naming_keys_and_nothing_changes(tmp_path):
    """Mixtral weights into a Qwen2-MoE: a CheckpointError names missing and unexpected keys; no weight changed."""
    converted_model("mixtral", seed=1).save_pretrained(tmp_path)
    model = converted_model("qwen2_moe", seed=2)
    before = _state(model)
    with pytest.raises(
        CheckpointError, match="Missing keys: \\[.*shared_expert.*unexpected keys: \\["
    ) as caught:
        load_model_weights(model, tmp_path)
    assert str(tmp_path) in str(caught.value)
    _assert_equal_state(model, before)


def test_other_expert_count_is_refused_before_any_weight_changes(tmp_path):
    """A Mixtral with 4 experts into one with 2: the merged experts have other shapes; nothing was loaded."""
    from transformers import MixtralForCausalLM

    converted_model("mixtral", seed=1).save_pretrained(tmp_path)
    config = converted_model("mixtral").config
    config.num_local_experts = 2
    torch.manual_seed(2)
    model = MixtralForCausalLM(config)
    before = _state(model)
    with pytest.raises(CheckpointError, match="nothing was loaded|could not be converted"):
        load_model_weights(model, tmp_path)
    _assert_equal_state(model, before)


def _assert_equal_state(model: torch.nn.Module, state: dict[str, torch.Tensor]) -> None:
    for name, value in model.state_dict().items():
        assert torch.equal(value, state[name]), name


def test_parameters_are_copied_into_not_replaced(tmp_path):
    """The loaded model keeps its Parameter objects (an optimizer or DDP holding them stays valid)."""
    converted_model("mixtral", seed=1).save_pretrained(tmp_path)
    model = converted_model("mixtral", seed=2)
    before = {name: id(param) for name, param in model.named_parameters()}
    load_model_weights(model, tmp_path)
    assert {name: id(param) for name, param in model.named_parameters()} == before


def test_plain_module_keeps_its_own_keys(tmp_path):
    """Not a PreTrainedModel: the state dict is loaded under its own names, no conversion asked for."""
    from hf_lightning.checkpoint.weights import save_model_weights

    model = RegressionModel(a=2.0, b=3.0)
    assert not is_pretrained_model(model)
    state = {"a": torch.tensor(1.0), "b": torch.tensor(2.0)}
    assert to_model_state(model, state, "here") == state
    save_model_weights(model, str(tmp_path))
    fresh = RegressionModel()
    load_model_weights(fresh, tmp_path)
    assert (fresh.a.item(), fresh.b.item()) == (2.0, 3.0)


class _GrowingBuffer(torch.nn.Module):
    """transformers' test model for the resumed data order: a buffer that grows with every batch seen, and a
    ``load_state_dict`` that takes the saved size."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(4, 3, bias=False)
        self.register_buffer("data_order", torch.empty(0, dtype=torch.long))

    def load_state_dict(self, state_dict, strict=True, assign=False):  # type: ignore[override]
        if "data_order" in state_dict and self.data_order.shape != state_dict["data_order"].shape:
            self.data_order = state_dict["data_order"].clone()
        return super().load_state_dict(state_dict, strict=strict, assign=assign)

    def forward(self, input_ids, labels=None):
        self.data_order = torch.cat([self.data_order, input_ids[:, 0].long()])
        logits = self.fc(input_ids)
        return {"loss": torch.nn.functional.cross_entropy(logits, labels), "logits": logits}


def test_a_model_with_its_own_load_state_dict_decides_what_fits(tmp_path):
    """A model overriding load_state_dict gets the saved tensors even where shapes differ; a resumed run then
    replays the uninterrupted run's data order, as under transformers."""
    from hf_lightning import Trainer, TrainingArguments

    data = torch.randn(10, 4)
    data[:, 0] = torch.arange(10)
    rows = [{"input_ids": x, "labels": torch.tensor(i % 3)} for i, x in enumerate(data)]
    kw = dict(per_device_train_batch_size=2, num_train_epochs=2, save_steps=2, optim="sgd",
              report_to="none", disable_tqdm=True, seed=3)  # fmt: skip
    full = _GrowingBuffer()
    Trainer(model=full, args=TrainingArguments(str(tmp_path / "a"), **kw), train_dataset=rows).train()
    loaded = _GrowingBuffer()
    load_model_weights(loaded, tmp_path / "a" / "checkpoint-4")
    assert loaded.data_order.tolist() == full.data_order[:8].tolist()
    resumed = _GrowingBuffer()
    trainer = Trainer(model=resumed, args=TrainingArguments(str(tmp_path / "b"), **kw), train_dataset=rows)
    trainer.train(resume_from_checkpoint=str(tmp_path / "a" / "checkpoint-4"))
    assert resumed.data_order.tolist() == full.data_order.tolist()
