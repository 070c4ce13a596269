"""One rank of tests/args/test_accelerate_state.py: accelerate's state under a 2-process launch.

Builds the arguments, logs through ``accelerate.logging``, builds a Trainer, seeds with
``set_seed(device_specific=True)`` (TRL's GRPO does), trains two steps and writes what it saw to
``OUT/rank<N>.json``."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from accelerate.logging import get_logger  # imported before the arguments, as a TRL script imports it
from accelerate.state import AcceleratorState, PartialState
from accelerate.utils import set_seed

from hf_lightning import Trainer, TrainingArguments
from tests.tiny import causal_lm_data, tiny_gpt2

out = Path(sys.argv[1])
args = TrainingArguments(str(out / "run"), use_cpu=True, report_to="none", max_steps=2,
                         per_device_train_batch_size=2, save_strategy="no", logging_steps=1)  # fmt: skip
group_after_args = dist.is_initialized()

get_logger("accelerate_state_worker").warning("accelerate logging before the Trainer")
partial = PartialState()
trainer = Trainer(model=tiny_gpt2(), args=args, train_dataset=causal_lm_data(n=8))
set_seed(100, device_specific=True)
seed = torch.initial_seed()
state = AcceleratorState()
result = trainer.train()
seen = {
    "group_after_args": group_after_args,
    "partial": [partial.num_processes, partial.process_index, partial.distributed_type.value],
    "state": [state.num_processes, state.process_index, state.mixed_precision, state.distributed_type.value],
    "seed": seed,
    "steps": result.global_step,
    "rank": dist.get_rank(),
}
(out / f"rank{args.process_index}.json").write_text(json.dumps(seen), encoding="utf-8")
