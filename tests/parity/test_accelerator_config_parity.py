"""``accelerator_config`` as transformers' Trainer reads it (``args/accelerator.py``).

On one process every key is honoured as accelerate honours it there: ``trainer.accelerator`` reports the
data-loading keys and ``gradient_state.plugin_kwargs``, ``gradient_accumulation_kwargs['num_steps']``
becomes ``gradient_accumulation_steps``, ``non_blocking`` without pinned memory warns, and
``use_seedable_sampler=False`` draws each epoch's order from torch's global generator — the same order
as transformers'. Under several processes the batch keys must keep their defaults, and a Lightning
user's ``HFModule(model, args)`` refuses the whole field (its DataLoader is the user's).
"""

from __future__ import annotations

import copy
import logging

import pytest
import torch
import transformers

import hf_lightning
from hf_lightning.args.accelerator import accelerator_settings

CONFIG = {"split_batches": True, "dispatch_batches": True, "even_batches": False, "use_seedable_sampler": False,
          "non_blocking": True, "gradient_accumulation_kwargs": {"sync_each_batch": True, "num_steps": 2}}  # fmt: skip


def _data() -> list[dict[str, torch.Tensor]]:
    return [
        {"input_ids": torch.tensor([i, 2, 3, 4]), "labels": torch.tensor([i, 2, 3, 4])} for i in range(16)
    ]


def _model():
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=64, n_positions=32))
    model.loss_type = "ForCausalLM"  # transformers counts shifted labels (docs/divergences.md)
    return model


def _run(mod, out, config) -> dict:
    rows: list[list[int]] = []

    class Recording(mod.Trainer):
        def compute_loss(self, model, inputs, **kwargs):
            rows.append(inputs["input_ids"][:, 0].tolist())
            return super().compute_loss(model, inputs, **kwargs)

    args = mod.TrainingArguments(str(out), per_device_train_batch_size=4, num_train_epochs=2, logging_steps=1,
                                 report_to="none", use_cpu=True, save_strategy="no",
                                 accelerator_config=copy.deepcopy(config))  # fmt: skip
    trainer = Recording(model=_model(), args=args, train_dataset=_data())
    a = trainer.accelerator
    seen = {
        "flags": (
            a.split_batches,
            a.dispatch_batches,
            a.even_batches,
            a.use_seedable_sampler,
            a.non_blocking,
        ),
        "plugin": a.gradient_state.plugin_kwargs,
        "accumulation": trainer.args.gradient_accumulation_steps,
    }
    trainer.train()
    return {**seen, "rows": rows, "loss": [e["loss"] for e in trainer.state.log_history if "loss" in e]}


@pytest.mark.parametrize("config", [CONFIG, {"use_seedable_sampler": True}], ids=["every-key", "seedable"])
def test_accelerator_config_on_one_process_is_transformers(tmp_path, config, caplog):
    theirs = _run(transformers, tmp_path / "hf", config)
    with caplog.at_level(logging.WARNING):
        ours = _run(hf_lightning, tmp_path / "hl", config)
    assert {k: ours[k] for k in ("flags", "plugin", "accumulation", "rows")} == {
        k: theirs[k] for k in ("flags", "plugin", "accumulation", "rows")
    }
    assert ours["loss"] == pytest.approx(theirs["loss"], abs=1e-5)
    warned = "`non_blocking` is enabled but `dataloader_pin_memory` is not" in caplog.text
    assert warned == bool(config.get("non_blocking"))


def test_num_steps_with_gradient_accumulation_is_refused_as_on_transformers(tmp_path):
    config = {"gradient_accumulation_kwargs": {"num_steps": 2}}
    for mod in (transformers, hf_lightning):
        args = mod.TrainingArguments(str(tmp_path), use_cpu=True, report_to="none",
                                     gradient_accumulation_steps=4, accelerator_config=config)  # fmt: skip
        with pytest.raises(
            ValueError, match="`num_steps` is set but `gradient_accumulation_steps` is greater"
        ):
            mod.Trainer(model=_model(), args=args)


def test_batch_keys_on_several_processes_are_refused_by_name(tmp_path):
    """Under several processes split_batches is carried (tests/parity/test_ddp_split_batches_parity.py); the
    other batch keys are refused by name, as is a batch that does not divide between the processes."""
    config = {"split_batches": True, "even_batches": False, "dispatch_batches": True, "non_blocking": True}
    args = hf_lightning.TrainingArguments(str(tmp_path), use_cpu=True, report_to="none",
                                          accelerator_config=config)  # fmt: skip
    env = {"WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2", "RANK": "0", "LOCAL_RANK": "0"}
    refused = r"accelerator_config=\{'dispatch_batches': True, 'even_batches': False\}\)` is not supported"
    with pytest.raises(NotImplementedError, match=refused):
        accelerator_settings(args, env)
    single = accelerator_settings(args, {})
    assert single.dataloader["split_batches"] is True and single.dataloader["non_blocking"] is True
    carried = hf_lightning.TrainingArguments(str(tmp_path), use_cpu=True, report_to="none",
                                             accelerator_config={"split_batches": True})  # fmt: skip
    assert accelerator_settings(carried, env).dataloader["split_batches"] is True


def test_dispatch_batches_false_on_several_processes_is_carried(tmp_path):
    """dispatch_batches=False (each process reads its own share) gives the batches the default gives, so it
    is accepted on several processes; set as an attribute (transformers' dispatch_batches.py script does
    ``args.accelerator_config.dispatch_batches = False``) it reaches the settings too."""
    env = {"WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2", "RANK": "0", "LOCAL_RANK": "0"}
    args = hf_lightning.TrainingArguments(str(tmp_path), use_cpu=True, report_to="none")
    args.accelerator_config.dispatch_batches = False
    assert args.accelerator_config["dispatch_batches"] is False
    assert accelerator_settings(args, env).dataloader["dispatch_batches"] is False
    theirs = transformers.TrainingArguments(str(tmp_path), use_cpu=True, report_to="none")
    theirs.accelerator_config.dispatch_batches = False
    assert (
        theirs.accelerator_config.to_dict()["dispatch_batches"]
        == args.accelerator_config.to_dict()["dispatch_batches"]
    )
