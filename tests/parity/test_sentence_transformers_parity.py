"""sentence-transformers' ``SentenceTransformerTrainer`` runs on hf_lightning as on transformers.

``tests/st_worker.py`` trains a SentenceTransformer (a tiny BERT from a config, mean pooling) with
``MultipleNegativesRankingLoss`` once with transformers' own classes and once with hf_lightning's bound in
(``hf_lightning.use_as_transformers_trainer()``) before ``sentence_transformers`` is imported. Compared: every
logged value within 1e-5, the checkpoint folders (sentence-transformers' own files included: ``modules.json``,
``1_Pooling/``, ...; hf_lightning adds ``checkpoint-manifest.json`` and ``training_args.json``), the weights;
a run resumed from checkpoint-3 (through sentence-transformers' ``_load_from_checkpoint``) is bit-identical to
the uninterrupted one, and ``load_best_model_at_end`` (its ``_load_best_model``) loads checkpoint-3.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.parity._subclass_runs import (
    assert_best_loaded,
    assert_resume_is_exact,
    assert_same_run,
    result,
    run_worker,
)

pytest.importorskip("sentence_transformers")

WORKER = str(Path(__file__).resolve().parents[1] / "st_worker.py")
SCENARIOS = ["st", "st_resume", "st_best"]


def test_sentence_transformer_trainer_trains_as_on_transformers(tmp_path):
    """The same losses, grad norms, learning rates, checkpoint files and weights as on transformers."""
    for backend in ("transformers", "hf_lightning"):
        run_worker(WORKER, tmp_path, backend, ["st"])
    ours = result(tmp_path, "hf_lightning", "st")
    assert_same_run(result(tmp_path, "transformers", "st"), ours)
    assert {"modules.json", "1_Pooling", "config_sentence_transformers.json"} <= set(
        ours["files"]["checkpoint-3"]
    )


def test_a_loss_with_weights_trains_them_as_on_transformers(tmp_path):
    """``SoftmaxLoss``'s classifier is trained, at its ``learning_rate_mapping`` rate, as on transformers: the
    trainer's ``get_optimizer_cls_and_kwargs`` override hands the loss's weights to the optimizer."""
    for backend in ("transformers", "hf_lightning"):
        run_worker(WORKER, tmp_path, backend, ["st_softmax"])
    ours = result(tmp_path, "hf_lightning", "st_softmax")
    assert_same_run(result(tmp_path, "transformers", "st_softmax"), ours)


@pytest.mark.slow
def test_sentence_transformer_resume_and_best_model(tmp_path):
    """Resumed from checkpoint-3: as transformers' resumed run, and bit-identical to the whole run; the best
    model (checkpoint-3, the higher eval loss) is loaded at the end, as on transformers."""
    for backend in ("transformers", "hf_lightning"):
        run_worker(WORKER, tmp_path, backend, SCENARIOS)
    resumed = result(tmp_path, "hf_lightning", "st_resume")
    assert_same_run(result(tmp_path, "transformers", "st_resume"), resumed)
    assert_resume_is_exact(result(tmp_path, "hf_lightning", "st"), resumed)
    best = result(tmp_path, "hf_lightning", "st_best")
    assert_same_run(result(tmp_path, "transformers", "st_best"), best)
    assert_best_loaded(best)
