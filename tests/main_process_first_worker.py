"""One rank of tests/args/test_main_process_first_ddp.py: time the entry and the exit of the block."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import torch.distributed as dist

from hf_lightning import TrainingArguments

out = Path(sys.argv[1])
args = TrainingArguments(str(out), report_to="none", use_cpu=True)
with args.main_process_first(desc="dataset map pre-processing"):
    entered = time.time()
    if args.process_index == 0:
        time.sleep(1.0)
    left = time.time()
state = args.distributed_state  # accelerate's PartialState methods, as transformers' arguments offer them
with state.main_process_first():
    state_entered = time.time()
    if args.process_index == 0:
        time.sleep(1.0)
    state_left = time.time()
state.wait_for_everyone()
times = {"entered": entered, "left": left, "group": dist.is_initialized(), "rank": dist.get_rank(),
         "state_entered": state_entered, "state_left": state_left, "backend": state.backend}  # fmt: skip
(out / f"rank{args.process_index}.json").write_text(json.dumps(times), encoding="utf-8")
