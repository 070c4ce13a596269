"""One run object per ``train()``: the parts write the run state to it, the Trainer reads it through.

transformers' Trainer attributes (``state``, ``control``, ``_train_batch_size``, ...) keep their names and
values; they are held by ``trainer.run`` (``trainer/run.py``) and the search (``trainer/hpsearch.py``).
"""

from __future__ import annotations

import ast
import pathlib

import hf_lightning
from hf_lightning.callbacks import TrainerCallback, TrainerControl, TrainerState
from hf_lightning.trainer.run import RUN_ATTRIBUTES, TrainingRun
from tests.trainer.test_trainer_parts import make_trainer

ROOT = pathlib.Path(__file__).resolve().parents[2]
TRAINER_NAMES = {"t", "trainer", "tr"}
"""How the parts name the Trainer they hold (``t = self.trainer``)."""
ALLOWED = {"model", "optimizer", "lr_scheduler"}
"""The Trainer attributes a part may rebind (transformers' own parts of the model and its optimization)."""
FIELD_WRITES = {
    ("callback_handler", "train_dataloader"),
    ("callback_handler", "eval_dataloader"),
    ("accelerator", "gradient_state"),
}
"""Fields of objects the Trainer holds that the parts set, as transformers' Trainer sets them (no Trainer
attribute is rebound by these)."""
LIGHTNING = {"should_stop"}
"""``lightning.Trainer.should_stop``: the adapters' callbacks stop Lightning's trainer (not ours)."""


def _chain(node: ast.expr) -> list[str] | None:
    """``t.a.b`` -> ["a", "b"] when the chain starts at the Trainer (``t``, ``trainer``, ``self.trainer``)."""
    names: list[str] = []
    while isinstance(node, ast.Attribute):
        names.insert(0, node.attr)
        value = node.value
        if isinstance(value, ast.Name) and value.id in TRAINER_NAMES:
            return names
        if isinstance(value, ast.Attribute) and value.attr == "trainer":
            return names
        node = value
    return None


def _outside_writes() -> dict[str, set[str]]:
    """Trainer attribute name -> the files (outside ``class Trainer``) that write through it."""
    files = [*(ROOT / "src/hf_lightning").rglob("*.py"), *(ROOT / "adapters").rglob("*.py")]
    found: dict[str, set[str]] = {}
    for path in files:
        tree = ast.parse(path.read_text())
        inside = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef) and node.name == "Trainer" and path.name == "trainer.py":
                inside |= {id(n) for n in ast.walk(node)}
        for node in ast.walk(tree):
            if id(node) in inside:
                continue
            targets = node.targets if isinstance(node, ast.Assign) else []
            if isinstance(node, (ast.AugAssign, ast.AnnAssign)):
                targets = [node.target]
            for target in _flat(targets):
                chain = _chain(target) if isinstance(target, ast.Attribute) else None
                if chain and tuple(chain[:2]) not in FIELD_WRITES and chain[0] not in LIGHTNING:
                    found.setdefault(chain[0], set()).add(str(path.relative_to(ROOT)))
    return found


def _flat(targets: list[ast.expr]) -> list[ast.expr]:
    """The assigned places: tuple targets unpacked, ``x.y[k] = v`` taken as a write through ``x.y``."""
    flat: list[ast.expr] = []
    for target in targets:
        while isinstance(target, (ast.Subscript, ast.Starred)):
            target = target.value
        if isinstance(target, (ast.Tuple, ast.List)):
            flat += _flat(list(target.elts))
        else:
            flat.append(target)
    return flat


def test_only_the_model_and_its_optimization_are_written_from_outside_the_trainer():
    written = _outside_writes()
    assert set(written) <= ALLOWED, {k: v for k, v in written.items() if k not in ALLOWED}
    assert written, "the AST walk found no write at all: it would pass whatever the parts do"


def test_the_walk_sees_a_part_writing_the_trainer(tmp_path):
    """The check above fails for the writes it forbids (a part rebinding ``t.state``, ``t.control.x``)."""
    source = "t.state = 1\nt.control.should_save = True\na, self.trainer.args = 1, 2\nt.state.x[0] = 1\n"
    targets = _flat([target for node in ast.parse(source).body for target in node.targets])
    found = [_chain(target) for target in targets if isinstance(target, ast.Attribute)]
    assert found == [["state"], ["control", "should_save"], ["args"], ["state", "x"]]


def _trainer(tmp_path, **overrides):
    return make_trainer(
        tmp_path, **{"per_device_train_batch_size": 4, "max_steps": 3, "logging_steps": 1, **overrides}
    )


def test_before_train_the_attributes_have_transformers_initial_values(tmp_path):
    trainer = _trainer(tmp_path)
    assert isinstance(trainer.state, TrainerState) and trainer.state.global_step == 0
    assert isinstance(trainer.control, TrainerControl)
    assert trainer._train_batch_size == trainer.args.train_batch_size == 4
    assert trainer.current_flos == 0 and trainer.is_in_train is False
    assert trainer.model_wrapped is trainer.model and trainer.deepspeed is None and trainer._trial is None
    assert trainer.hp_search_backend is None and trainer.objective is None and trainer.hub_model_id is None
    assert trainer.state is trainer.run.state and trainer._train_batch_size == trainer.run.train_batch_size


def test_assignment_before_train_is_seen_by_the_run_object(tmp_path):
    trainer = _trainer(tmp_path)
    state, control = TrainerState(), TrainerControl()
    trainer.state, trainer.control, trainer._train_batch_size = state, control, 2
    assert trainer.run.state is state and trainer.run.control is control and trainer.run.train_batch_size == 2
    assert trainer.state is state and trainer.control is control


class _Watcher(TrainerCallback):
    """Reads the Trainer's attributes during training and assigns ``trainer.control`` from a callback."""

    def __init__(self) -> None:
        self.trainer = None
        self.seen: list[tuple] = []

    def on_step_end(self, args, state, control, **kwargs):
        t = self.trainer
        self.seen.append((state is t.state, control is t.control, t.is_in_train, t._train_batch_size))
        if state.global_step == 2:
            replacement = TrainerControl(should_training_stop=True)
            t.control = replacement  # a callback assigns the Trainer's control: the loop sees it
            return replacement
        return control


def test_during_train_a_callback_reads_and_assigns_through_the_trainer(tmp_path):
    trainer = _trainer(tmp_path)
    watcher = _Watcher()
    watcher.trainer = trainer
    trainer.add_callback(watcher)
    output = trainer.train()
    assert watcher.seen == [(True, True, True, 4), (True, True, True, 4)]
    assert output.global_step == trainer.state.global_step == 2  # the assigned control stopped training
    assert trainer.is_in_train is False


def test_each_train_gets_a_fresh_run_object_and_the_attributes_keep_their_values(tmp_path):
    trainer = _trainer(tmp_path)
    before = trainer.run
    control = trainer.control
    first = trainer.train()
    first_run, first_state = trainer.run, trainer.state
    assert first_run is not before and isinstance(first_run, TrainingRun)
    assert first_state.global_step == 3
    assert [entry["step"] for entry in first_state.log_history] == [1, 2, 3, 3]
    assert trainer.control is control  # transformers keeps one TrainerControl across train() calls
    trainer.state.best_metric = 0.5  # a user's write after train() lands where the Trainer reads it
    assert trainer.run.state.best_metric == 0.5
    second = trainer.train()
    assert trainer.run is not first_run and trainer.run.number == first_run.number + 1
    assert trainer.state is not first_state and trainer.state.global_step == 3  # a new TrainerState
    assert first_run.state is first_state  # the earlier run object still holds its own state
    assert second.training_loss != first.training_loss  # the loss sum restarted, on the trained model
    assert trainer._train_batch_size == 4 and trainer.current_flos == 0


def test_run_attributes_map_every_transformers_name_the_trainer_reads_through():
    for name, held in RUN_ATTRIBUTES.items():
        view = getattr(hf_lightning.Trainer, name)
        assert (view.part, view.name) == ("run", held)
