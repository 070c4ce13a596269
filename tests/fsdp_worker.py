"""One rank of a 2-process run for ``tests/adapters/test_fsdp.py``: DDP, FSDP2 or FSDP1 (full shard, shard_grad_op, checkpointing).

``python tests/fsdp_worker.py OUT MODE``: trains a tiny GPT-2 for 4 optimizer steps with GA 2 and
writes ``OUT/MODE_rank{r}.pt`` holding the logged losses, the full weights and the number of
parameter elements this rank holds locally.
"""

from __future__ import annotations

import os
import sys

import torch

from tests.tiny import causal_lm_data, tiny_gpt2

__all__ = ["MODES", "train"]

MODES = {
    "ddp": {},
    "fsdp": {"fsdp": "full_shard auto_wrap", "fsdp_config": {"transformer_layer_cls_to_wrap": ["GPT2Block"]}},
    "fsdp_grad_op": {"fsdp": True, "fsdp_config": {"reshard_after_forward": False}},
    "fsdp_ckpt": {"fsdp": True, "fsdp_config": {"activation_checkpointing": True, "min_num_params": 0}},
    "fsdp_offload": {
        "fsdp": "full_shard offload auto_wrap",
        "fsdp_config": {"transformer_layer_cls_to_wrap": ["GPT2Block"]},
    },
    "fsdp_size": {
        "fsdp": True,
        "fsdp_config": {"auto_wrap_policy": "SIZE_BASED_WRAP", "min_num_params": 20000},
    },
    "fsdp1": {
        "fsdp": "full_shard auto_wrap",
        "fsdp_config": {"version": 1, "transformer_layer_cls_to_wrap": ["GPT2Block"]},
    },
    "fsdp1_grad_op": {"fsdp": "shard_grad_op", "fsdp_config": {"version": 1}},
    "fsdp1_hybrid": {"fsdp": "hybrid_shard", "fsdp_config": {"version": 1}},
    "fsdp1_size_ckpt": {
        "fsdp": "full_shard",
        "fsdp_config": {
            "version": 1,
            "auto_wrap_policy": "SIZE_BASED_WRAP",
            "min_num_params": 20000,
            "activation_checkpointing": True,
        },
    },
    "ddp_twice": {},
    "fsdp1_twice": {"fsdp": "full_shard auto_wrap", "fsdp_config": {"version": 1}},
    "fsdp1_ckpt": {
        "fsdp": "full_shard auto_wrap",
        "fsdp_config": {"version": 1, "activation_checkpointing": True, "backward_prefetch": "backward_pre"},
    },
    "fsdp1_size": {
        "fsdp": "full_shard",
        "fsdp_config": {"version": 1, "auto_wrap_policy": "SIZE_BASED_WRAP", "min_num_params": 20000},
    },
    **{
        f"zero{stage}": {
            "deepspeed": {
                "zero_optimization": {"stage": stage, "reduce_bucket_size": "auto"},
                "train_micro_batch_size_per_gpu": "auto",
                "gradient_accumulation_steps": "auto",
                "train_batch_size": "auto",
                "gradient_clipping": "auto",
            }
        }
        for stage in (2, 3)
    },
}


def _local_numel(model: torch.nn.Module) -> int:
    from hf_lightning.checkpoint.sharded import fsdp_root

    root = fsdp_root(model)
    if root is not None:  # FSDP1: the flat shards this process holds (padding included)
        from torch.distributed.fsdp import FullyShardedDataParallel

        units = FullyShardedDataParallel.fsdp_modules(root)
        return sum(unit._flat_param.numel() for unit in units if unit._flat_param is not None)
    total = 0
    for param in model.parameters():
        local = getattr(param, "to_local", None)
        partition = getattr(param, "ds_tensor", None)  # DeepSpeed ZeRO-3
        total += (partition if partition is not None else local() if local is not None else param).numel()
    return total


def _checkpointed_layers(model: torch.nn.Module) -> int:
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import CheckpointWrapper

    from hf_lightning.checkpoint.sharded import fsdp_root

    return sum(isinstance(module, CheckpointWrapper) for module in (fsdp_root(model) or model).modules())


def _full_state(model: torch.nn.Module) -> dict:
    if any(hasattr(param, "ds_numel") for param in model.parameters()):
        import deepspeed

        with deepspeed.zero.GatheredParameters(list(model.parameters())):
            return {name: value.detach().clone() for name, value in model.state_dict().items()}
    from hf_lightning.checkpoint.sharded import fsdp_root, gathered_model_state

    if fsdp_root(model) is not None:
        return gathered_model_state(model)
    state = {}
    for name, value in model.state_dict().items():
        full = getattr(value, "full_tensor", None)
        state[name] = (full() if full is not None else value).detach().clone()
    return state


def train(out_dir: str, mode: str) -> dict:
    """Train in ``mode``; return the losses logged, the full weights and the local element count."""
    from hf_lightning import Trainer, TrainingArguments

    args = TrainingArguments(
        os.path.join(out_dir, mode),
        use_cpu=True,
        report_to="none",
        disable_tqdm=True,
        save_strategy="no",
        seed=3,
        per_device_train_batch_size=2,
        gradient_accumulation_steps=2,
        max_steps=4,
        learning_rate=0.05,
        optim="sgd",
        lr_scheduler_type="constant",
        logging_steps=1,
        **MODES[mode],
    )
    model = tiny_gpt2(dropout=0.0)
    trainer = Trainer(model=model, args=args, train_dataset=causal_lm_data(n=32, seed=5))
    trainer.train()
    if mode.endswith(
        "_twice"
    ):  # a second train() of the same Trainer: from step 0, the same optimizer object
        trainer.train()
    trainer.save_model(os.path.join(out_dir, f"{mode}_saved"))  # every rank: the weights are gathered
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    norms = [entry["grad_norm"] for entry in trainer.state.log_history if "grad_norm" in entry]
    state = _full_state(model)
    each_node = TrainingArguments(os.path.join(out_dir, mode), save_on_each_node=True, log_on_each_node=False)
    return {
        "losses": losses,
        "grad_norms": norms,
        "state": state,
        "local_numel": _local_numel(model),
        "checkpointed_layers": _checkpointed_layers(model),
        "should_log": args.should_log,  # log_on_each_node=True (the default)
        "should_save": args.should_save,  # save_on_each_node=False (the default)
        "should_save_each_node": each_node.should_save,
        "should_log_once": each_node.should_log,
    }


if __name__ == "__main__":
    out, mode = sys.argv[1], sys.argv[2]
    record = train(out, mode)
    rank = os.environ.get("RANK", os.environ.get("SLURM_PROCID"))  # torchrun's or srun's
    torch.save(record, os.path.join(out, f"{mode}_rank{rank}.pt"))
