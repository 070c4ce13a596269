"""``trainer.accelerator`` on 2 processes (gloo) answers as accelerate's ``Accelerator`` on the same inputs.

``tests/accelerator_ddp_worker.py`` runs on each rank and asks hf_lightning's accelerator (before training,
and inside ``train()`` through the running Lightning strategy) and accelerate's ``Accelerator`` the same
questions: the process values, ``gather`` / ``gather_for_metrics`` / ``reduce`` / ``pad_across_processes``
(values, dtypes, shapes), ``split_between_processes`` (with and without padding), ``print`` and the
``on_*`` decorators (main process only), ``main_process_first``, ``save`` (once), and the batches each
rank gets from ``prepare(DataLoader)`` (``even_batches`` on and off, and a shuffled loader over 2 epochs).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests._ddp import run_ranks

pytest.importorskip("accelerate")
pytestmark = [pytest.mark.ddp, pytest.mark.slow]

WORKER = str(Path(__file__).resolve().parents[1] / "accelerator_ddp_worker.py")
# accelerate's names a file after the process that saves; ours and theirs are saved under their own tag
SAVE = {
    "ours": ["saved-ours-rank0.pt"],
    "accelerate": ["saved-accelerate-rank0.pt"],
    "fit": ["saved-fit-rank0.pt"],
}


@pytest.fixture(scope="module")
def answers(tmp_path_factory):
    out = tmp_path_factory.mktemp("accelerator-ddp")
    run_ranks(WORKER, [str(out)], world=2, timeout=600)
    return [json.loads((out / f"rank{rank}.json").read_text(encoding="utf-8")) for rank in (0, 1)]


def _questions(answers) -> list[str]:
    return sorted(set(answers[0]["accelerate"]) - {"save", "print"})


@pytest.mark.parametrize("who", ["ours", "fit"])
def test_every_answer_matches_accelerate_on_each_rank(answers, who):
    """Before training and inside train(), each rank's answers equal accelerate's on that rank."""
    for rank, found in enumerate(answers):
        theirs, ours = found["accelerate"], found[who]
        different = {q: (theirs[q], ours[q]) for q in _questions(answers) if theirs[q] != ours[q]}
        assert different == {}, f"rank {rank}"
    assert all(found["fit"]["in_fit"] for found in answers)  # asked through the running fit


def test_the_answers_are_those_of_two_processes(answers):
    """A sanity check of the oracle: two ranks, rank-ordered gathers, shares dealt as accelerate deals them."""
    first, second = (found["accelerate"] for found in answers)
    assert (first["num_processes"], first["process_index"], second["process_index"]) == (2, 0, 1)
    assert first["gather.2d"]["shape"] == [4, 3] and first["gather.2d"]["values"][2] == [10, 11, 12]
    assert first["split.list.False"] == ["list", [0, 1, 2]] and second["split.list.False"] == ["list", [3, 4]]
    assert second["split.list.True"] == ["list", [3, 4, 4]]
    assert first["prepare.even=True"] == [[0, 1, 2], [6, 7, 8]] and second["prepare.even=True"] == [
        [3, 4, 5],
        [9, 10, 0],
    ]


@pytest.mark.parametrize("who", ["ours", "fit"])
def test_print_save_and_decorators_on_the_main_process_only(answers, who):
    """print and the on_main_process decorator act on rank 0 only, on_last_process on rank 1, save writes once."""
    for rank, found in enumerate(answers):
        assert found[who]["print"] == (f"printed by {who}\n" if rank == 0 else "")
        assert found[who]["on_main_process"] == ("ran" if rank == 0 else None)
        assert found[who]["on_last_process"] == ("ran" if rank == 1 else None)
        assert found[who]["save"] == SAVE[who] and found["accelerate"]["save"] == SAVE["accelerate"]
