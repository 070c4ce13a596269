"""Tiny models and data shared by the tests (built from configs, generated in the test: offline)."""

from __future__ import annotations

import torch
from torch import nn

from hf_lightning.callbacks import TrainerCallback

__all__ = [
    "HP_SEARCH_ARGS",
    "RegressionModel",
    "StopAt",
    "causal_lm_data",
    "regression_data",
    "tiny_gpt2",
    "tiny_llama",
]


def tiny_gpt2(seed: int = 0, *, dropout: float = 0.1, fix_hf_count: bool = False) -> nn.Module:
    """A 2-layer GPT-2 (n_embd 64, vocabulary 256). ``fix_hf_count`` makes transformers count shifted labels."""
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(seed)
    config = GPT2Config(
        n_layer=2,
        n_embd=64,
        n_head=2,
        vocab_size=256,
        n_positions=64,
        bos_token_id=0,
        eos_token_id=0,
        resid_pdrop=dropout,
        embd_pdrop=dropout,
        attn_pdrop=dropout,
    )
    model = GPT2LMHeadModel(config)
    if fix_hf_count:
        # transformers only shifts the label count for registered causal-LM loss types (docs/divergences.md, divergence 1)
        model.loss_type = "ForCausalLM"
    return model


def tiny_llama(seed: int = 0) -> nn.Module:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        vocab_size=128,
        max_position_embeddings=64,
    )
    return LlamaForCausalLM(config)


def causal_lm_data(
    n: int = 16, seq_len: int = 12, vocab: int = 256, seed: int = 0, ragged: bool = True
) -> list[dict[str, torch.Tensor]]:
    """Random token sequences whose labels start with a random number of -100 (ragged targets)."""
    g = torch.Generator().manual_seed(seed)
    data = []
    for _ in range(n):
        ids = torch.randint(0, vocab, (seq_len,), generator=g)
        labels = ids.clone()
        if ragged:
            labels[: int(torch.randint(0, seq_len // 2, (1,), generator=g))] = -100
        data.append({"input_ids": ids, "labels": labels})
    return data


class RegressionModel(nn.Module):
    """y = a*x + b with an MSE loss when labels are given; a plain nn.Module (no config)."""

    def __init__(self, a: float = 0.0, b: float = 0.0, dropout: float = 0.0) -> None:
        super().__init__()
        self.a = nn.Parameter(torch.tensor(a))
        self.b = nn.Parameter(torch.tensor(b))
        self.dropout = nn.Dropout(dropout)

    def forward(self, input_x: torch.Tensor, labels: torch.Tensor | None = None):
        y = self.dropout(self.a * input_x + self.b)
        if labels is None:
            return (y,)
        return (nn.functional.mse_loss(y, labels), y)


def regression_data(n: int = 64, seed: int = 0) -> list[dict[str, torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, generator=g)
    y = 2.0 * x + 3.0 + 0.1 * torch.randn(n, generator=g)
    return [{"input_x": x[i], "labels": y[i]} for i in range(n)]


# TrainingArguments of the hyperparameter-search tests: one epoch of 4 steps, evaluated at its end.
HP_SEARCH_ARGS = dict(
    per_device_train_batch_size=8,
    num_train_epochs=1,
    eval_strategy="epoch",
    save_strategy="no",
    report_to="none",
    disable_tqdm=True,
    learning_rate=0.1,
    seed=0,
)


class StopAt(TrainerCallback):
    """Stops training after ``step`` optimizer steps (a checkpoint due at that step is saved first)."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == self.step:
            control.should_training_stop = True
