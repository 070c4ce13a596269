"""The layer rules (docs/architecture.md) hold, and tools/check_layers.py catches each kind of violation."""

from __future__ import annotations

import importlib.util
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _checker():
    spec = importlib.util.spec_from_file_location("check_layers", ROOT / "tools" / "check_layers.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_tree_follows_the_layer_rules():
    """No engine import outside adapters/, imports point down, no reach-in to another layer's private names."""
    assert _checker().violations() == []


def _plant(root: pathlib.Path, files: dict[str, str]) -> None:
    for rel, text in {
        "src/hf_lightning/__init__.py": "",
        "src/hf_lightning/trainer/__init__.py": "",
        "src/hf_lightning/trainer/run.py": "class Run:\n    def __init__(self):\n        self._tr_loss = 0\n",
        "adapters/__init__.py": "",
        **files,
    }.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


@pytest.mark.parametrize(
    ("rel", "source", "expected"),
    [
        ("src/hf_lightning/args/a.py", "import lightning as L\n", "imports lightning"),
        ("src/hf_lightning/trainer/t.py", "from optuna import trial\n", "imports optuna"),
        ("src/hf_lightning/loss.py", "from hf_lightning.trainer import Trainer\n", "the vocabulary imports"),
        (
            "src/hf_lightning/loss.py",
            "from hf_lightning.adapters.fit import run_fit\n",
            "the vocabulary imports",
        ),
        ("adapters/fit.py", "from hf_lightning.trainer.run import Run\n", "the engine imports"),
        ("adapters/fit.py", "def f(trainer):\n    return trainer._tr_loss\n", "private _tr_loss"),
        ("adapters/fit.py", "from hf_lightning.loss import _helper\n", "private name _helper"),
        ("src/hf_lightning/trainer/t.py", "import hf_lightning.adapters.fit as fit\nfit._x\n", "fit._x"),
        # relative imports are resolved: adapters/ is installed as hf_lightning.adapters
        ("adapters/fit.py", "from ..trainer.run import Run\n", "the engine imports hf_lightning.trainer.run"),
        (
            "adapters/callbacks/c.py",
            "from ...trainer import Trainer\n",
            "the engine imports hf_lightning.trainer",
        ),
        (
            "src/hf_lightning/args/a.py",
            "from ..adapters import fit\n",
            "the vocabulary imports hf_lightning.adapters",
        ),
    ],
)
def test_the_checker_reports_a_planted_violation(tmp_path, rel, source, expected):
    """Each kind of violation planted in a copy of the layout is reported, naming the file."""
    _plant(tmp_path, {rel: source})
    found = _checker().violations(tmp_path)
    assert len(found) == 1 and expected in found[0] and found[0].startswith(rel), found


def test_the_checker_accepts_the_allowed_directions(tmp_path):
    """Facade -> adapters -> vocabulary imports, and an object's own private names, are fine."""
    _plant(
        tmp_path,
        {
            "src/hf_lightning/trainer/t.py": "from hf_lightning.adapters.fit import run_fit\n",
            "adapters/fit.py": "import lightning\nfrom hf_lightning.loss import count\nfrom .plan import Plan\n"
            "class M:\n    def f(self):\n        return self._tr_loss\n",
        },
    )
    assert _checker().violations(tmp_path) == []


def test_the_graph_shows_the_engines_own_arrows(tmp_path):
    """adapters/ imports its own modules relatively; the graph resolves them (engine -> engine) and shows
    only allowed arrows on the real tree."""
    checker = _checker()
    _plant(
        tmp_path,
        {"adapters/fit.py": "from .plan import Plan\nfrom . import windows\n", "adapters/plan.py": ""},
    )
    assert checker.layer_graph(tmp_path) == {("engine", "engine"): 2}
    real = checker.layer_graph()
    assert real[("engine", "engine")] > 0
    assert all(there in checker.ALLOWED[here] for here, there in real), real


def test_the_facade_reaches_the_engine_through_one_door():
    """Only ``trainer/engine_door.py`` imports ``hf_lightning.adapters``: every other facade module uses its
    ``ENGINE`` (``adapters/engine.py`` lists all the facade asks of the engine)."""
    checker = _checker()
    facade = pathlib.Path(checker.ROOT, "src", "hf_lightning", "trainer")
    importing = sorted(
        path.name
        for path in facade.rglob("*.py")
        if any(checker.layer_of(module) == "engine" for _, module in checker.imported_modules(path))
    )
    assert importing == ["engine_door.py"]
