"""Training parity with transformers.Trainer: losses, learning rates, grad norms, steps, weights."""

from __future__ import annotations

import pytest
import torch

from tests.parity._run import assert_same_logs, assert_same_weights, run_both, step_logs
from tests.tiny import RegressionModel, causal_lm_data, regression_data, tiny_gpt2, tiny_llama

GA_ARGS = dict(
    per_device_train_batch_size=2,
    gradient_accumulation_steps=4,
    learning_rate=1e-3,
    warmup_steps=2,
    lr_scheduler_type="linear",
    weight_decay=0.01,
    logging_steps=1,
    num_train_epochs=2,
)


def test_gpt2_ragged_labels_ga4_matches_transformers(tmp_path):
    """Tiny GPT-2, ragged -100 labels, 2 x GA 4, warmup, weight decay, dropout: same logs and weights."""
    data = causal_lm_data(n=20)  # 10 micro-batches per epoch: the last window of each epoch is short
    runs = run_both(lambda name: tiny_gpt2(fix_hf_count=name == "hf"), data, tmp_path, **GA_ARGS)
    assert runs["ours"].state.global_step == runs["hf"].state.global_step == 6
    assert_same_logs(runs["hf"], runs["ours"])
    assert_same_weights(runs["hf"], runs["ours"])


def test_llama_causal_lm_matches_transformers_unmodified(tmp_path):
    """A ForCausalLM model (whose label count transformers shifts correctly) matches with no adjustment."""
    runs = run_both(lambda name: tiny_llama(), causal_lm_data(n=16, vocab=128), tmp_path, **GA_ARGS)
    assert_same_logs(runs["hf"], runs["ours"])
    assert_same_weights(runs["hf"], runs["ours"])


def test_plain_module_regression_matches_transformers(tmp_path):
    """A plain nn.Module (loss divided by the window size) trains to the same numbers."""
    runs = run_both(
        lambda name: RegressionModel(),
        regression_data(64),
        tmp_path,
        per_device_train_batch_size=4,
        gradient_accumulation_steps=3,
        learning_rate=0.1,
        logging_steps=2,
        num_train_epochs=2,
        max_grad_norm=0.5,
    )
    assert runs["ours"].state.global_step == runs["hf"].state.global_step
    assert_same_logs(runs["hf"], runs["ours"])
    assert_same_weights(runs["hf"], runs["ours"])


def test_final_train_metrics_keys_match(tmp_path):
    """The last log_history entry has transformers' keys (train_runtime, ..., total_flos, train_loss)."""
    runs = run_both(
        lambda name: tiny_gpt2(fix_hf_count=name == "hf"),
        causal_lm_data(n=8),
        tmp_path,
        per_device_train_batch_size=4,
        max_steps=2,
        logging_steps=1,
    )
    final = {name: t.state.log_history[-1] for name, t in runs.items()}
    assert set(final["ours"]) == set(final["hf"])
    assert final["ours"]["total_flos"] == final["hf"]["total_flos"]
    torch.testing.assert_close(final["ours"]["train_loss"], final["hf"]["train_loss"], rtol=1e-5, atol=0)


def test_max_steps_fractional_epochs_and_logging_ratio(tmp_path):
    """num_train_epochs=1.5 and logging_steps=0.25 resolve to the same steps as transformers."""
    runs = run_both(
        lambda name: RegressionModel(),
        regression_data(40),
        tmp_path,
        per_device_train_batch_size=4,
        num_train_epochs=1.5,
        logging_steps=0.25,
        learning_rate=0.05,
    )
    assert runs["ours"].state.global_step == runs["hf"].state.global_step == 15
    assert [h["step"] for h in step_logs(runs["ours"])] == [h["step"] for h in step_logs(runs["hf"])]
    assert_same_logs(runs["hf"], runs["ours"])


@pytest.mark.parametrize("logging_first_step", [True, False])
def test_logging_cadence_and_nan_filter(tmp_path, logging_first_step):
    """logging_first_step and a window-averaged loss every 3 steps, as transformers."""
    runs = run_both(
        lambda name: RegressionModel(),
        regression_data(48),
        tmp_path,
        per_device_train_batch_size=4,
        logging_steps=3,
        logging_first_step=logging_first_step,
        num_train_epochs=1,
        learning_rate=0.05,
    )
    assert_same_logs(runs["hf"], runs["ours"])
