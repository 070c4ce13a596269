"""DeepSpeed's checkpoint folder read safely, and a resume that needs one (one process, no engine run)."""

from __future__ import annotations

import os
import pickle

import pytest
import torch

from hf_lightning.checkpoint.deepspeed_state import (
    _safe_engine_loading,
    deepspeed_save_options,
    has_deepspeed_state,
    request_deepspeed_resume,
)
from hf_lightning.checkpoint.io import CheckpointError
from tests.tiny import tiny_gpt2


class _Planted:
    """Runs ``os.system`` when unpickled by a plain ``torch.load(weights_only=False)``."""

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (os.system, ("touch PLANTED",))


class _CheckpointEngine:
    def load(self, path: str, map_location=None):  # type: ignore[no-untyped-def]
        return torch.load(path, map_location=map_location, weights_only=False)  # DeepSpeed's own reader


class _Engine:
    def __init__(self) -> None:
        self.checkpoint_engine = _CheckpointEngine()


def test_engine_files_are_read_with_weights_only_and_deepspeeds_classes(tmp_path, monkeypatch) -> None:
    """Inside the resume, the engine's reader takes DeepSpeed's records (ZeroStageEnum, fragment_address,
    LossScaler) and refuses a planted object without running it; the engine's own reader is back after."""
    pytest.importorskip("deepspeed")  # the `deepspeed` extra
    from deepspeed.runtime.zero.config import ZeroStageEnum
    from deepspeed.utils.tensor_fragment import fragment_address

    monkeypatch.chdir(tmp_path)
    good, bad = tmp_path / "good.pt", tmp_path / "bad.pt"
    torch.save({"stage": ZeroStageEnum.gradients, "map": {"w": fragment_address(numel=4, start=0)}}, good)
    bad.write_bytes(pickle.dumps({"optimizer": _Planted()}, protocol=2))  # torch.save's protocol
    engine = _Engine()
    with _safe_engine_loading(engine):
        assert engine.checkpoint_engine.load(str(good))["stage"] is ZeroStageEnum.gradients
        with pytest.raises(CheckpointError, match="bad.pt"):
            engine.checkpoint_engine.load(str(bad))
    assert not (tmp_path / "PLANTED").exists()
    assert "load" not in vars(engine.checkpoint_engine)


def test_resume_under_deepspeed_needs_deepspeeds_state(tmp_path) -> None:
    """A checkpoint written without DeepSpeed cannot resume a DeepSpeed run (transformers refuses it too)."""
    folder = tmp_path / "checkpoint-2"
    folder.mkdir()
    (folder / "optimizer.pt").write_bytes(b"")
    assert not has_deepspeed_state(folder)
    with pytest.raises(CheckpointError, match="written without DeepSpeed"):
        request_deepspeed_resume(tiny_gpt2(), str(folder))
    (folder / "global_step2").mkdir()
    (folder / "latest").write_text("global_step2")
    assert has_deepspeed_state(folder)


def test_save_options_are_empty_without_an_engine() -> None:
    """A model no DeepSpeed engine trains saves as usual."""
    assert deepspeed_save_options(tiny_gpt2(), object(), everywhere=False) == {}


def test_a_resume_request_a_failed_fit_left_is_dropped(tmp_path) -> None:
    """A resume request not taken by the engine (the fit failed first) does not reach a later run."""
    from hf_lightning.checkpoint.deepspeed_state import load_pending_deepspeed_state

    folder = tmp_path / "checkpoint-2"
    (folder / "global_step2").mkdir(parents=True)
    (folder / "latest").write_text("global_step2")
    model = tiny_gpt2()
    request_deepspeed_resume(model, str(folder))
    request_deepspeed_resume(model, None)
    assert load_pending_deepspeed_state(model, engine=None) is None
