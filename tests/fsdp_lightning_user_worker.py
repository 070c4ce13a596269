"""One rank of a plain Lightning user's 2-process run under FSDP, for ``tests/adapters/test_fsdp_lightning_user.py``.

``python tests/fsdp_lightning_user_worker.py OUT MODULE VERSION`` fits ``MODULE`` (``HFModule``,
``FSDP1Module`` or ``FSDP2Module``) with a ``lightning.Trainer`` built from ``to_lightning(args)``
(``VERSION``: 0 for no FSDP, else ``fsdp_config['version']``) for 3 optimizer steps with GA 2, and
writes ``OUT/MODULE_VERSION_rank{r}.json``: the full weights' sums, or the error the fit raised.
"""

from __future__ import annotations

import json
import os
import sys

import lightning as L
import torch
from torch.utils.data import DataLoader, DistributedSampler
from transformers import default_data_collator

from tests.tiny import causal_lm_data, tiny_gpt2


def main(out: str, module_name: str, version: int) -> None:
    from hf_lightning import TrainingArguments, adapters
    from hf_lightning.checkpoint.sharded import gathered_model_state

    torch.set_num_threads(1)
    fsdp = {"fsdp": "full_shard auto_wrap", "fsdp_config": {"version": version}} if version else {}
    args = TrainingArguments("out", use_cpu=True, learning_rate=0.05, optim="sgd", max_steps=3,
                             gradient_accumulation_steps=2, report_to="none", **fsdp)  # fmt: skip
    plan = adapters.to_lightning(args, env=dict(os.environ))
    trainer = L.Trainer(**{**plan.trainer_kwargs, "logger": False, "enable_checkpointing": False,
                           "enable_progress_bar": False, "enable_model_summary": False})  # fmt: skip
    module = getattr(adapters, module_name)(tiny_gpt2(dropout=0.0), args)
    data = causal_lm_data(24, seed=2)
    world, rank = int(os.environ["WORLD_SIZE"]), int(os.environ["RANK"])  # the process group starts in fit()
    sampler = DistributedSampler(data, world, rank, shuffle=False)  # Lightning shards only plain loaders
    loader = DataLoader(data, batch_size=2, sampler=sampler, collate_fn=default_data_collator)
    record: dict = {}
    try:
        trainer.fit(module, train_dataloaders=adapters.AccumulationWindows(loader, 2))
    except TypeError as exc:
        record["error"] = str(exc)
    else:
        state = gathered_model_state(module.model) if version else module.model.state_dict()
        record["weights"] = {name: float(value.double().sum()) for name, value in state.items()}
    with open(os.path.join(out, f"{module_name}_{version}_rank{rank}.json"), "w", encoding="utf-8") as handle:
        json.dump(record, handle)
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]))
