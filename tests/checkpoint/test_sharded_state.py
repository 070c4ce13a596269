"""``hf_lightning.checkpoint.sharded`` in one process: the distributed-checkpoint layout read and written safely."""

from __future__ import annotations

import os
import pickle

import pytest
import torch

from hf_lightning.checkpoint import CheckpointError, load_model_weights
from hf_lightning.checkpoint.folders import checkpoint_problem
from hf_lightning.checkpoint.sharded import load_optimizer_state, save_sharded_state
from tests.tiny import tiny_gpt2


def _stepped(seed: int = 0) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    model = tiny_gpt2(seed=seed, dropout=0.0)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.01)
    ids = torch.randint(0, 256, (2, 8), generator=torch.Generator().manual_seed(seed))
    model(input_ids=ids, labels=ids).loss.backward()
    optimizer.step()
    return model, optimizer


def _sharded_folder(tmp_path, model, optimizer) -> str:
    folder = str(tmp_path / "checkpoint-1")
    save_sharded_state(folder, model, optimizer)
    with open(os.path.join(folder, "trainer_state.json"), "w", encoding="utf-8") as handle:
        handle.write('{"global_step": 1}')
    return folder


def test_sharded_folder_is_a_complete_checkpoint_and_loads(tmp_path) -> None:
    """``pytorch_model_fsdp_0/`` counts as the model's weights; it loads into a fresh model, optimizer too."""
    model, optimizer = _stepped()
    folder = _sharded_folder(tmp_path, model, optimizer)
    assert sorted(os.listdir(folder)) == ["optimizer_0", "pytorch_model_fsdp_0", "trainer_state.json"]
    assert checkpoint_problem(folder) is None
    fresh, fresh_optimizer = _stepped(seed=1)
    load_model_weights(fresh, folder)
    for name, value in model.state_dict().items():
        assert torch.equal(fresh.state_dict()[name], value), name
    assert load_optimizer_state(fresh, fresh_optimizer, folder) == "optimizer_0"
    saved, loaded = optimizer.state_dict(), fresh_optimizer.state_dict()
    for index, state in saved["state"].items():
        assert torch.equal(loaded["state"][index]["exp_avg"], state["exp_avg"])
        assert torch.equal(loaded["state"][index]["step"], state["step"])


def test_accelerate_optimizer_bin_keyed_by_name_loads(tmp_path) -> None:
    """Accelerate's full ``optimizer.bin`` (keyed by parameter name) restores the optimizer."""
    from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

    model, optimizer = _stepped()
    torch.save(get_optimizer_state_dict(model, optimizer), tmp_path / "optimizer.bin")
    fresh, fresh_optimizer = _stepped(seed=1)
    fresh.load_state_dict(model.state_dict())
    assert load_optimizer_state(fresh, fresh_optimizer, str(tmp_path)) == "optimizer.bin"
    for index, state in optimizer.state_dict()["state"].items():
        assert torch.equal(fresh_optimizer.state_dict()["state"][index]["exp_avg_sq"], state["exp_avg_sq"])


class _Planted:
    def __reduce__(self):  # what a hostile metadata file would run on an unrestricted pickle.load
        return (os.system, ("touch planted-by-metadata",))


def test_metadata_pickle_with_foreign_objects_is_refused(tmp_path, monkeypatch) -> None:
    """A ``.metadata`` that would run code is refused with CheckpointError naming it; nothing runs."""
    model, optimizer = _stepped()
    folder = _sharded_folder(tmp_path, model, optimizer)
    metadata = os.path.join(folder, "pytorch_model_fsdp_0", ".metadata")
    with open(metadata, "wb") as handle:
        pickle.dump(_Planted(), handle)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(CheckpointError, match=r"\.metadata") as caught:
        load_model_weights(tiny_gpt2(seed=1), folder)
    assert caught.value.path == metadata
    assert not (tmp_path / "planted-by-metadata").exists()


def test_a_model_that_does_not_fit_the_sharded_checkpoint_is_named(tmp_path) -> None:
    """Loading a sharded checkpoint into another architecture raises CheckpointError naming the folder."""
    from transformers import GPT2Config, GPT2LMHeadModel

    model, optimizer = _stepped()
    folder = _sharded_folder(tmp_path, model, optimizer)
    other = GPT2LMHeadModel(GPT2Config(n_layer=3, n_embd=64, n_head=2, vocab_size=256, n_positions=64))
    with pytest.raises(CheckpointError, match="pytorch_model_fsdp_0"):
        load_model_weights(other, folder)


class _EnumByGetattr:
    def __reduce__(self):  # how Python 3.11.2 pickles the enum members inside DCP's .metadata
        from torch.distributed.checkpoint.metadata import _MEM_FORMAT_ENCODING

        return (getattr, (_MEM_FORMAT_ENCODING, "TORCH_CONTIGUOUS_FORMAT"))


class _GetattrEscape:
    def __reduce__(self):  # getattr reaching past an enum member: the first step of a code-running chain
        from torch.distributed.checkpoint.metadata import _MEM_FORMAT_ENCODING

        return (getattr, (_MEM_FORMAT_ENCODING, "__class__"))


def test_metadata_reader_takes_enum_members_pickled_by_getattr_and_nothing_else() -> None:
    """``getattr`` in a ``.metadata`` resolves only a public member of an allowed enum."""
    import io

    from torch.distributed.checkpoint.metadata import _MEM_FORMAT_ENCODING

    from hf_lightning.checkpoint.dcp_reader import _MetadataUnpickler

    member = _MetadataUnpickler(io.BytesIO(pickle.dumps(_EnumByGetattr()))).load()
    assert member is _MEM_FORMAT_ENCODING.TORCH_CONTIGUOUS_FORMAT
    with pytest.raises(pickle.UnpicklingError, match="__class__"):
        _MetadataUnpickler(io.BytesIO(pickle.dumps(_GetattrEscape()))).load()
