"""Checksums taken while a checkpoint is written (format 2, XXH3-128), and format-1 (SHA-256) manifests
written by earlier versions, still verified."""

from __future__ import annotations

import hashlib
import io
import json
import os

import torch
import xxhash

from hf_lightning.checkpoint import save_checkpoint
from hf_lightning.checkpoint.hashing import ALGORITHM, HashingWriter, file_entry
from hf_lightning.checkpoint.sealing import FolderSealer
from hf_lightning.checkpoint.verify import MANIFEST_NAME, content_problem, read_manifest, write_manifest
from tests.tiny import RegressionModel


def _saved(tmp_path) -> str:
    model = RegressionModel()
    optimizer = torch.optim.AdamW(model.parameters())
    model(torch.ones(2), labels=torch.ones(2))[0].backward()
    optimizer.step()
    return save_checkpoint(tmp_path, 1, model=model, optimizer=optimizer, state={"global_step": 1})


def _flip(path: str, offset: int) -> None:
    with open(path, "r+b") as handle:
        handle.seek(offset)
        byte = handle.read(1)
        handle.seek(offset)
        handle.write(bytes([byte[0] ^ 0x10]))


def test_torch_save_through_the_hashing_writer_writes_the_same_bytes_and_their_digest(tmp_path):
    """What torch.save writes through HashingWriter is byte for byte a plain save, and its digest is the file's."""
    state = {"a": torch.arange(10.0), "b": [torch.ones(3), 2]}
    plain = io.BytesIO()
    torch.save(state, plain)
    path = tmp_path / "x.pt"
    with open(path, "wb") as handle:
        writer = HashingWriter(handle)
        torch.save(state, writer)
        writer.flush()
    assert path.read_bytes() == plain.getvalue()
    assert writer.entry() == file_entry(str(path))
    assert writer.entry()["size"] == len(plain.getvalue())


def test_large_blocks_hashed_beside_their_writing_give_the_file_digest(tmp_path):
    """Blocks of 1 MiB or more are hashed on the hashing thread while they are written: same bytes, and the
    digest of the whole file in order, also when small and large writes alternate."""
    g = torch.Generator().manual_seed(0)
    state = {f"t{i}": torch.randn(n, generator=g) for i, n in enumerate((5, 600_000, 3, 300_000, 1_000_000))}
    plain = io.BytesIO()
    torch.save(state, plain)
    path = tmp_path / "big.pt"
    with open(path, "wb") as handle:
        writer = HashingWriter(handle)
        torch.save(state, writer)
        writer.write(b"tail")  # one more small write after the large ones
        writer.flush()
    assert path.read_bytes() == plain.getvalue() + b"tail"
    assert writer.entry() == file_entry(str(path))


def test_a_large_write_that_fails_leaves_no_hash_running(tmp_path):
    """A write error is raised, and the hash of that block has ended (its buffer may be freed next)."""

    class Full(io.RawIOBase):
        def writable(self):
            return True

        def write(self, data):
            raise OSError(28, "No space left on device")

    writer = HashingWriter(Full())
    block = bytearray(2 * 1024 * 1024)
    try:
        writer.write(block)
    except OSError as exc:
        assert exc.errno == 28
    else:
        raise AssertionError("the write error was not raised")
    assert writer.size == 0
    assert writer.entry()[ALGORITHM] == xxhash.xxh3_128(bytes(block)).hexdigest()  # its hash had ended


def test_a_new_manifest_records_xxh3_128_taken_while_writing_equal_to_a_read_back(tmp_path):
    """Format 2 names its algorithm; the checksums taken during the save equal hashing the files afterwards."""
    folder = _saved(tmp_path)
    manifest = json.loads(open(os.path.join(folder, MANIFEST_NAME)).read())
    assert manifest["format"] == 2 and manifest["algorithm"] == ALGORITHM == "xxh3_128"
    during = manifest["files"]
    write_manifest(folder)  # everything hashed again, from the files
    assert read_manifest(folder) == during
    assert set(during) >= {"model.safetensors", "optimizer.pt", "rng_state.pth", "trainer_state.json"}


def _write_format_1(folder: str) -> None:
    files = {}
    for name in sorted(os.listdir(folder)):
        if name in (MANIFEST_NAME, "checkpoint-is-incomplete.txt"):
            continue
        data = open(os.path.join(folder, name), "rb").read()
        files[name] = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    with open(os.path.join(folder, MANIFEST_NAME), "w") as handle:
        json.dump({"format": 1, "files": files}, handle)


def test_a_format_1_sha256_manifest_is_still_verified(tmp_path):
    """A checkpoint saved by an earlier version (SHA-256 manifest) passes intact and is caught after a bit flip."""
    folder = _saved(tmp_path)
    _write_format_1(folder)
    assert read_manifest(folder)["optimizer.pt"]["sha256"]
    assert content_problem(folder) is None
    _flip(os.path.join(folder, "optimizer.pt"), os.path.getsize(os.path.join(folder, "optimizer.pt")) // 2)
    problem = content_problem(folder)
    assert problem is not None and "optimizer.pt" in problem


def test_a_bit_flip_is_caught_by_the_xxh3_checksum(tmp_path):
    """A flipped bit inside tensor data (structurally invisible) is named by the format-2 check."""
    folder = _saved(tmp_path)
    path = os.path.join(folder, "model.safetensors")
    _flip(path, os.path.getsize(path) - 2)
    assert content_problem(folder) == (
        f"`{path}` is corrupt: its XXH3-128 checksum differs from the one recorded when it was saved"
    )


def test_a_manifest_naming_an_unknown_algorithm_is_refused(tmp_path):
    """A manifest whose checksums this process cannot compute is a problem naming the algorithm, not a pass."""
    folder = _saved(tmp_path)
    manifest = json.loads(open(os.path.join(folder, MANIFEST_NAME)).read())
    manifest["algorithm"] = "md4"
    manifest["files"] = {k: {"size": v["size"], "md4": "00"} for k, v in manifest["files"].items()}
    with open(os.path.join(folder, MANIFEST_NAME), "w") as handle:
        json.dump(manifest, handle)
    problem = content_problem(folder)
    assert problem is not None and "cannot be verified: Unknown checksum algorithm 'md4'" in problem


def test_the_sealer_hashes_files_written_by_other_code_and_leaves_other_ranks_files_to_finish(tmp_path):
    """seal_new_files takes this process's new files; rng_state_1.pth (another rank's) is sealed by finish()."""
    sealer = FolderSealer(str(tmp_path))
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "rng_state_1.pth.tmp-123").write_bytes(b"partial")
    sealer.seal_new_files()
    os.replace(tmp_path / "rng_state_1.pth.tmp-123", tmp_path / "rng_state_1.pth")
    sealer.write("optimizer.pt", lambda handle: handle.write(b"x" * 1000))
    entries = sealer.finish()
    assert sorted(entries) == ["config.json", "optimizer.pt", "rng_state_1.pth"]
    assert entries["rng_state_1.pth"] == file_entry(str(tmp_path / "rng_state_1.pth"))


def test_a_stale_checksum_is_not_recorded(tmp_path):
    """An entry whose size no longer matches its file (rewritten after it was sealed) is hashed again."""
    (tmp_path / "a.json").write_text('{"x": 1}')
    stale = {"a.json": {"size": 3, ALGORITHM: "0" * 32}}
    write_manifest(tmp_path, stale)
    assert read_manifest(tmp_path)["a.json"] == file_entry(str(tmp_path / "a.json"))
