"""transformers' own Trainer tests that patch ``trainer.accelerator.state`` pass with hf_lightning's names swapped in.

transformers' ``tests/trainer/test_trainer_moe_loss.py`` checks the token-averaged loss across processes
without launching any: it patches ``trainer.accelerator.state.num_processes`` (and ``parallelism_config``
for tensor parallelism), gives ``compute_loss`` one rank's half of a batch with the whole batch's
``num_items_in_batch``, and expects the full batch's loss and gradients. The checks that hold for
transformers 5.24's Trainer (its dense-model cases: the model's loss, a ``compute_loss_func``, label
smoothing, tensor-parallel ranks, no scaling without averaging or a token count) run here on both
Trainers, so the oracle shows each check can fail.
"""

from __future__ import annotations

from types import SimpleNamespace
from unittest.mock import patch

import pytest
import torch

import hf_lightning

transformers = pytest.importorskip("transformers")
LIBRARIES = {"transformers": transformers, "hf_lightning": hf_lightning}


def get_trainer(lib, tmp_path, compute_loss_func=None, **args):
    """transformers' get_trainer(dense=True): a Llama with the test's configuration."""
    torch.manual_seed(17)
    config = transformers.LlamaConfig(
        vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, max_position_embeddings=128, use_cache=False, pad_token_id=0,
    )  # fmt: skip
    return lib.Trainer(
        model=transformers.LlamaForCausalLM(config),
        args=lib.TrainingArguments(output_dir=str(tmp_path), use_cpu=True, report_to="none", **args),
        compute_loss_func=compute_loss_func,
    )


def check_partitioned_loss(trainer, *, tp_size=1):
    """transformers' check: one rank's half batch, scaled by the patched process count, gives the full loss."""
    rows = [(torch.arange(9) * (3 + i) + 92 + i * 11) % 125 + 3 for i in range(4)]
    input_ids = torch.stack(rows).repeat_interleave(2, dim=0)
    batch = {
        "input_ids": input_ids,
        "labels": input_ids.clone(),
        "attention_mask": torch.ones_like(input_ids),
    }

    def loss_and_gradients(world_size):
        trainer.model.zero_grad(set_to_none=True)
        inputs = {key: value[::world_size] for key, value in batch.items()}
        with patch.object(trainer.accelerator.state, "num_processes", world_size * tp_size):
            loss = trainer.compute_loss(trainer.model, inputs, num_items_in_batch=64)
        loss.backward()
        grads = {
            n: p.grad.detach().clone() for n, p in trainer.model.named_parameters() if p.grad is not None
        }
        return loss.detach(), grads

    full_loss, full_gradients = loss_and_gradients(1)
    local_loss, local_gradients = loss_and_gradients(2)
    torch.testing.assert_close(local_loss, full_loss)
    assert local_gradients.keys() == full_gradients.keys()
    for name in full_gradients:
        torch.testing.assert_close(
            local_gradients[name], full_gradients[name], atol=1e-6, rtol=1e-4, msg=name
        )


def causal_lm_loss(outputs, labels, num_items_in_batch):
    return transformers.loss.loss_utils.ForCausalLMLoss(
        outputs.logits, labels, vocab_size=128, num_items_in_batch=num_items_in_batch
    )


@pytest.mark.parametrize("library", LIBRARIES)
def test_dense_model(library, tmp_path):
    check_partitioned_loss(get_trainer(LIBRARIES[library], tmp_path))


@pytest.mark.parametrize("library", LIBRARIES)
def test_custom_loss(library, tmp_path):
    check_partitioned_loss(get_trainer(LIBRARIES[library], tmp_path, compute_loss_func=causal_lm_loss))


@pytest.mark.parametrize("library", LIBRARIES)
def test_label_smoothing(library, tmp_path):
    check_partitioned_loss(get_trainer(LIBRARIES[library], tmp_path, label_smoothing_factor=0.1))


@pytest.mark.parametrize("library", LIBRARIES)
def test_tensor_parallel_ranks_do_not_increase_loss_scale(library, tmp_path):
    trainer = get_trainer(LIBRARIES[library], tmp_path)
    parallelism_config = SimpleNamespace(tp_size=2, sp_backend=None)
    with patch.object(trainer.accelerator.state, "parallelism_config", parallelism_config):
        assert trainer.accelerator.parallelism_config is parallelism_config and trainer.get_tp_size() == 2
        check_partitioned_loss(trainer, tp_size=2)


@pytest.mark.parametrize("library", LIBRARIES)
@pytest.mark.parametrize(
    "average_tokens,num_items", [(False, 64), (True, None)], ids=["averaging_off", "no_count"]
)
def test_unscaled_model_loss(library, tmp_path, average_tokens, num_items):
    trainer = get_trainer(LIBRARIES[library], tmp_path, average_tokens_across_devices=average_tokens)
    input_ids = torch.arange(18).reshape(2, 9) + 3
    inputs = {
        "input_ids": input_ids,
        "labels": input_ids.clone(),
        "attention_mask": torch.ones_like(input_ids),
    }
    expected = trainer.model(**inputs, num_items_in_batch=num_items).loss
    with patch.object(trainer.accelerator.state, "num_processes", 2):
        loss, outputs = trainer.compute_loss(
            trainer.model, inputs, return_outputs=True, num_items_in_batch=num_items
        )
    torch.testing.assert_close(loss, expected)
    torch.testing.assert_close(outputs.loss, expected)
