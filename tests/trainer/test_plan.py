"""``Trainer.plan``: built once, rebuilt when the arguments change, read live as transformers reads
``self.args``; every field of every group has a reader."""

from __future__ import annotations

import ast
import copy
import dataclasses
import pickle
from pathlib import Path

import pytest

from hf_lightning import TrainingArguments
from hf_lightning.plan import facade, groups
from tests.tiny import RegressionModel, regression_data

ROOT = Path(__file__).resolve().parents[2]
BASE = dict(report_to="none", save_strategy="no", use_cpu=True, disable_tqdm=True, seed=0)


def _trainer(lib, tmp_path, **kwargs):
    args = lib.TrainingArguments(output_dir=str(tmp_path), **{**BASE, **kwargs})
    return lib.Trainer(
        model=RegressionModel(),
        args=args,
        train_dataset=regression_data(32),
        eval_dataset=regression_data(8, seed=1),
    )


def _shape(trainer) -> list[tuple[int, tuple[str, ...]]]:
    """Each log_history entry as (step, its keys without the timings): what was logged and evaluated when."""
    timing = ("runtime", "per_second", "total_flos", "model_preparation_time")
    return [
        (entry["step"], tuple(sorted(k for k in entry if not any(t in k for t in timing))))
        for entry in trainer.state.log_history
    ]


def test_plan_is_built_once_and_rebuilt_when_args_are_set_or_replaced(tmp_path):
    trainer = _trainer(__import__("hf_lightning"), tmp_path, logging_steps=2, max_steps=4)
    first = trainer.plan
    assert trainer.plan is first  # not rebuilt while the arguments are unchanged
    assert first.schedule.eval_on_start is False
    trainer.args.eval_on_start = True
    assert trainer.plan is not first and trainer.plan.schedule.eval_on_start is True
    trainer.args = TrainingArguments(output_dir=str(tmp_path / "other"), **{**BASE, "seed": 7})
    assert trainer.plan.runtime.seed == 7 and trainer.plan.checkpoint.output_dir == str(tmp_path / "other")


def test_printed_plan_shows_each_group_and_hides_the_token(tmp_path):
    trainer = _trainer(
        __import__("hf_lightning"), tmp_path, hub_token="secret", gradient_accumulation_steps=3
    )
    shown = str(trainer.plan)
    for group in (
        "module:",
        "data:",
        "schedule:",
        "checkpoint:",
        "hub:",
        "evaluation:",
        "length:",
        "runtime:",
    ):
        assert f"\n  {group}\n" in shown
    assert "    gradient_accumulation_steps = 3\n" in shown
    assert "secret" not in shown and "secret" not in repr(trainer.plan)


def test_a_copied_or_pickled_trainer_builds_its_own_plan(tmp_path):
    trainer = _trainer(__import__("hf_lightning"), tmp_path, max_steps=4)
    plan = trainer.plan
    clone = copy.copy(trainer)
    clone.args = copy.copy(trainer.args)
    clone.args.max_steps = 2
    assert clone.plan.length.max_steps == 2 and trainer.plan is plan  # the original keeps its plan
    restored = pickle.loads(pickle.dumps(trainer.args))
    assert restored.max_steps == 4


@pytest.mark.parametrize("replace", [False, True], ids=["set-fields", "replace-args"])
def test_arguments_changed_after_init_apply_to_the_next_train_as_in_transformers(tmp_path, replace):
    """Set on ``trainer.args`` after construction, or a new ``trainer.args``: the next train() follows it."""
    import transformers

    import hf_lightning

    shapes = {}
    for name, lib in (("hf", transformers), ("ours", hf_lightning)):
        changes = dict(eval_steps=2, logging_steps=1, eval_on_start=True, logging_nan_inf_filter=False)
        # made first: transformers' TrainingArguments resets accelerate's state, which its Trainer then lacks
        other = lib.TrainingArguments(
            output_dir=str(tmp_path / name), **{**BASE, "eval_strategy": "steps", "max_steps": 6, **changes}
        )
        trainer = _trainer(
            lib, tmp_path / name, eval_strategy="steps", eval_steps=4, logging_steps=4, max_steps=8
        )
        if replace:
            trainer.args = other
        else:
            for field, value in changes.items():
                setattr(trainer.args, field, value)
        trainer.train()
        shapes[name] = _shape(trainer)
    assert shapes["ours"] == shapes["hf"]
    assert any(
        step == 0 and "eval_loss" in keys for step, keys in shapes["ours"]
    )  # eval_on_start took effect


def _group_fields() -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for module in (facade, groups):
        for name in module.__all__:
            cls = getattr(module, name)
            if dataclasses.is_dataclass(cls):
                for item in dataclasses.fields(cls):
                    found.setdefault(item.name, set()).add(name)
    return found


def _attribute_reads() -> set[str]:
    """Attribute names read in src/ and adapters/, except on ``args`` and in the plan and its builders."""
    plan = ROOT / "src/hf_lightning/plan"
    names: set[str] = set()
    for path in [*(ROOT / "src/hf_lightning").rglob("*.py"), *(ROOT / "adapters").rglob("*.py")]:
        if path == ROOT / "src/hf_lightning/args/translate.py" or path == plan / "trainer_plan.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
                base = node.value
                on_args = (isinstance(base, ast.Name) and base.id == "args") or (
                    isinstance(base, ast.Attribute) and base.attr == "args"
                )
                if not on_args:
                    names.add(node.attr)
    return names


def test_every_group_field_has_a_reader():
    """A field of a plan group that no code reads (other than on ``args``) is a plan that lies."""
    reads = _attribute_reads()
    unread = {field: owners for field, owners in _group_fields().items() if field not in reads}
    assert unread == {}


def test_a_change_inside_a_fields_value_is_not_seen_until_the_field_is_set(tmp_path):
    """docs/divergences.md: the plan holds copies of dict fields, so editing one in place changes nothing;
    setting the field (the documented way) is seen at once."""
    trainer = _trainer(__import__("hf_lightning"), tmp_path, lr_scheduler_kwargs={"power": 1.0})
    trainer.args.lr_scheduler_kwargs["power"] = 2.0
    assert dict(trainer.plan.module.lr_scheduler_kwargs) == {"power": 1.0}
    trainer.args.lr_scheduler_kwargs = {"power": 2.0}
    assert dict(trainer.plan.module.lr_scheduler_kwargs) == {"power": 2.0}
