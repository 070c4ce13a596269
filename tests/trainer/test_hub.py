"""push_to_hub through huggingface_hub against the test Hub (tests/hub_server.py): what is pushed, and when."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from huggingface_hub import HfApi, ModelCard, snapshot_download

from hf_lightning import Trainer, TrainerCallback, TrainingArguments
from tests.hub_server import TOKEN, USER
from tests.tiny import RegressionModel, StopAt, regression_data

REPO = f"{USER}/hub-run"


def _trainer(tmp_path: Path, **kwargs) -> Trainer:
    settings = dict(
        output_dir=str(tmp_path / "hub-run"),
        use_cpu=True,
        report_to="none",
        disable_tqdm=True,
        per_device_train_batch_size=4,
        max_steps=6,
        save_steps=2,
        learning_rate=0.1,
        push_to_hub=True,
        hub_token=TOKEN,
        seed=0,
    )
    settings.update(kwargs)
    return Trainer(
        model=RegressionModel(), args=TrainingArguments(**settings), train_dataset=regression_data(32)
    )


def _local_files(folder: Path, skip_checkpoints: bool = True) -> set[str]:
    """Files under ``folder`` that transformers' rule pushes: no ``_*`` file, no ``checkpoint-*`` folder."""
    found = set()
    for path in folder.rglob("*"):
        relative = path.relative_to(folder)
        top = relative.parts[0]
        if (
            path.is_file()
            and not (skip_checkpoints and top.startswith("checkpoint-"))
            and not path.name.startswith("_")
        ):
            found.add(relative.as_posix())
    return found


def test_trainer_creates_the_repository_under_the_tokens_user(tmp_path, hub_server):
    """With push_to_hub, Trainer() creates <user>/<output_dir name> and records it as hub_model_id."""
    trainer = _trainer(tmp_path)
    assert trainer.hub_model_id == REPO
    assert hub_server.exists(REPO)


def test_hub_model_id_names_the_repository(tmp_path, hub_server):
    """hub_model_id="org/name" is the repository pushed to."""
    trainer = _trainer(tmp_path, hub_model_id="team/named")
    assert trainer.hub_model_id == "team/named"


def test_rejected_token_is_an_error_before_training(tmp_path, hub_server):
    """A token the Hub refuses stops Trainer() with an error naming hub_token."""
    with pytest.raises(ValueError, match="hub_token"):
        _trainer(tmp_path, hub_token="hf_wrong")


def test_end_pushes_only_on_push_to_hub(tmp_path, hub_server):
    """hub_strategy="end": no push during training; push_to_hub() sends output_dir without checkpoints."""
    trainer = _trainer(tmp_path, hub_strategy="end")
    trainer.train()
    assert hub_server.commits == []
    trainer.push_to_hub()
    assert [c.message for c in hub_server.commits] == ["End of training"]
    pushed = hub_server.files(REPO)
    assert pushed == _local_files(tmp_path / "hub-run")
    assert {"model.safetensors", "README.md", "training_args.bin"} <= pushed


def test_card_on_the_hub_carries_the_metadata(tmp_path, hub_server):
    """The pushed README.md is the model card: generated_from_trainer, the model-index named after the model."""
    trainer = _trainer(tmp_path, hub_strategy="end")
    trainer.train()
    trainer.push_to_hub()
    card = ModelCard(hub_server.read(REPO, "README.md").decode())
    assert "generated_from_trainer" in card.data.tags
    assert card.data.to_dict()["model-index"][0]["name"] == "hub-run"


def test_save_model_pushes_a_model_save_commit(tmp_path, hub_server):
    """save_model() pushes with the message "Model save", as transformers does."""
    trainer = _trainer(tmp_path, hub_strategy="end", max_steps=1)
    trainer.save_model()
    assert [c.message for c in hub_server.commits] == ["Model save"]


def test_every_save_pushes_at_each_save_in_order(tmp_path, hub_server):
    """hub_strategy="every_save": one commit per save, in step order, no checkpoint folder on the Hub."""
    trainer = _trainer(tmp_path, hub_strategy="every_save", hub_always_push=True)
    trainer.train()
    messages = [c.message for c in hub_server.commits]
    assert messages == [f"Training in progress, step {n}" for n in (2, 4, 6)]
    assert hub_server.files(REPO) == _local_files(tmp_path / "hub-run")
    assert "model.safetensors" in hub_server.files(REPO)


@pytest.mark.parametrize(
    ("strategy", "folders"),
    [
        ("checkpoint", {"last-checkpoint"}),
        ("all_checkpoints", {"checkpoint-2", "checkpoint-4", "checkpoint-6"}),
    ],
)
def test_checkpoint_strategies_push_the_checkpoint_folders(tmp_path, hub_server, strategy, folders):
    """ "checkpoint" keeps the latest checkpoint as last-checkpoint/, "all_checkpoints" pushes every one."""
    trainer = _trainer(tmp_path, hub_strategy=strategy, hub_always_push=True)
    trainer.train()
    pushed = hub_server.files(REPO)
    assert {name.split("/")[0] for name in pushed if "/" in name} == folders
    output_dir = tmp_path / "hub-run"
    expected = _local_files(output_dir)
    for step in (2, 4, 6) if strategy == "all_checkpoints" else (6,):
        in_repo = "last-checkpoint" if strategy == "checkpoint" else f"checkpoint-{step}"
        expected |= {f"{in_repo}/{name}" for name in _local_files(output_dir / f"checkpoint-{step}", False)}
    assert pushed == expected
    assert hub_server.commits[1].message == "Training in progress, step 2, checkpoint"


def test_every_save_skips_while_a_push_is_in_flight(tmp_path, hub_server):
    """A slow Hub: training does not wait for it; saves during a push are not pushed; the final push is complete."""
    import threading

    hub_server.gate = threading.Event()
    trainer = _trainer(tmp_path, hub_strategy="every_save")
    trainer.add_callback(_ReleaseAtTrainEnd(hub_server))
    trainer.train()
    assert [c.message for c in hub_server.commits] == ["Training in progress, step 2"]
    trainer.push_to_hub()
    final = hub_server.read(REPO, "model.safetensors")
    assert final == (tmp_path / "hub-run" / "model.safetensors").read_bytes()


class _ReleaseAtTrainEnd(TrainerCallback):
    """Opens the slow Hub's gate once training (all 6 steps and 3 saves) has run without it."""

    def __init__(self, server) -> None:
        self.server = server

    def on_train_end(self, args, state, control, **kwargs):
        assert state.global_step == 6 and self.server.commits == []  # trained while the first push waited
        self.server.gate.set()


def test_failed_intermediate_push_warns_and_training_goes_on(tmp_path, hub_server, caplog):
    """The 2nd commit refused: a warning names it, training finishes, the final push succeeds."""
    hub_server.fail_commits = {2}
    trainer = _trainer(tmp_path, hub_strategy="every_save", hub_always_push=True)
    with caplog.at_level("WARNING", logger="hf_lightning.trainer.hub"):
        trainer.train()
    assert "Training in progress, step 4" in caplog.text
    assert trainer.state.global_step == 6
    trainer.push_to_hub()
    assert hub_server.commits[-1].message == "End of training"


def test_hub_down_at_the_end_names_repository_and_local_path(tmp_path, hub_server):
    """A refused final push raises an error naming the repository and the local folder, which is complete."""
    from hf_lightning.trainer.hub import HubPushError

    trainer = _trainer(tmp_path, hub_strategy="end")
    trainer.train()
    hub_server.fail_commits = {1}
    output_dir = tmp_path / "hub-run"
    with pytest.raises(HubPushError, match=REPO) as caught:
        trainer.push_to_hub()
    assert str(output_dir) in str(caught.value)
    assert {"model.safetensors", "README.md", "training_args.bin"} <= _local_files(output_dir)


def test_resume_from_downloaded_last_checkpoint(tmp_path, hub_server, monkeypatch):
    """Download the repository, resume from last-checkpoint: the same final weights as an uninterrupted run."""
    straight = _trainer(tmp_path / "a", push_to_hub=False)
    straight.train()
    first = _trainer(tmp_path / "b", hub_strategy="checkpoint", hub_always_push=True)
    first.add_callback(StopAt(4))
    first.train()
    local = tmp_path / "downloaded"
    snapshot_download(REPO, local_dir=local, token=TOKEN, endpoint=hub_server.url)
    resumed = _trainer(tmp_path / "c", push_to_hub=False)
    monkeypatch.chdir(local)
    resumed.train(resume_from_checkpoint="last-checkpoint")
    for name, value in straight.model.state_dict().items():
        torch.testing.assert_close(resumed.model.state_dict()[name], value)


@pytest.mark.slow  # huggingface_hub retries a refused connection with backoff (about 25 s)
def test_hub_unreachable_at_the_end_names_repository_and_local_path(tmp_path, hub_server):
    """With the Hub down, push_to_hub() raises naming the repository and the complete local output_dir."""
    from hf_lightning.trainer.hub import HubPushError

    trainer = _trainer(tmp_path, hub_strategy="end")
    trainer.train()
    hub_server.stop()
    with pytest.raises(HubPushError, match=REPO) as caught:
        trainer.push_to_hub()
    assert str(tmp_path / "hub-run") in str(caught.value)
    assert {"model.safetensors", "README.md", "training_args.bin"} <= _local_files(tmp_path / "hub-run")


def test_only_the_main_process_pushes(tmp_path, hub_server, monkeypatch):
    """A process other than the main one creates no repository and pushes nothing."""
    monkeypatch.setattr(Trainer, "is_world_process_zero", lambda self: False)
    trainer = _trainer(tmp_path, hub_strategy="checkpoint")
    trainer.train()
    trainer.push_to_hub()
    assert trainer.hub_model_id is None
    assert not hub_server.exists(REPO) and hub_server.commits == []


def test_hub_revision_is_the_branch_pushed_to(tmp_path, hub_server):
    """hub_revision="dev": the checkpoint pushes land on the dev branch, main keeps no model."""
    trainer = _trainer(tmp_path, hub_revision="dev", hub_always_push=True)
    trainer.train()
    assert {c.revision for c in hub_server.commits} == {"dev"}
    assert "model.safetensors" in hub_server.files(REPO, "dev")
    assert hub_server.files(REPO, "main") == set()


def test_hub_private_repo_creates_a_private_repository(tmp_path, hub_server):
    """hub_private_repo=True: the repository is created private."""
    _trainer(tmp_path, hub_private_repo=True)
    assert HfApi(endpoint=hub_server.url).repo_info(REPO, token=TOKEN).private is True


def test_missing_token_is_an_error_before_training(tmp_path, hub_server, monkeypatch):
    """No hub_token and no login: Trainer() stops with an error naming hub_token."""
    monkeypatch.delenv("HF_TOKEN")
    with pytest.raises(ValueError, match="hub_token"):
        _trainer(tmp_path, hub_token=None)
