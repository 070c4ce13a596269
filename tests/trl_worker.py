"""TRL's trainers on a tiny Llama, on transformers or on hf_lightning: ``python trl_worker.py BACKEND ROOT SCENARIO...``.

``BACKEND`` is ``transformers`` or ``hf_lightning`` (then ``hf_lightning.use_as_transformers_trainer()``
runs before ``trl`` is imported). Each scenario trains in ``ROOT/BACKEND/<scenario>`` and writes
``<scenario>.json`` there (``log_history``, the files of each folder, the best checkpoint, the model
card's metadata and text) and ``<scenario>.safetensors`` (the trainable weights at the end). Run by
``tests/parity/test_trl_parity.py``, once per backend (and per rank under DDP: ``tests/_ddp.py``).

Scenarios: ``sft`` (6 steps, checkpoints at 3 and 6), ``sft_resume`` (resumes ``sft``'s checkpoint-3),
``sft_best`` (evaluation at 3 and 6, the best model loaded at the end), and the same three with a LoRA
``peft_config`` (``lora``, ``lora_resume``, ``lora_best``); ``dpo`` (DPOTrainer on 16 preference pairs);
``grpo`` (GRPOTrainer: 4 generations a prompt, a length reward, 2 steps); ``reward`` (RewardTrainer),
``kto`` (KTOTrainer) and ``dpo_sync`` (DPOTrainer with ``sync_ref_model``), 3 steps each; ``rloo``
(RLOOTrainer) and ``distill`` (DistillationTrainer with a teacher), 2 steps each.
"""

from __future__ import annotations

import json
import os
import sys
import traceback

BACKEND, ROOT, SCENARIOS = sys.argv[1], sys.argv[2], sys.argv[3:]
if BACKEND == "hf_lightning":
    import hf_lightning

    hf_lightning.use_as_transformers_trainer()

import torch  # noqa: E402
from safetensors.torch import save_file  # noqa: E402

WORLD = int(os.environ.get("WORLD_SIZE", "1"))
RANK = int(os.environ.get("RANK", "0"))


def tokenizer():
    """A 128-word WordLevel tokenizer trained on pydoc's topics (offline), with pad/bos/eos tokens."""
    from pydoc_data.topics import topics

    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer(models.WordLevel(unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    special = ["<unk>", "<pad>", "<s>", "</s>"]
    backend.train_from_iterator(
        list(topics.values()), trainers.WordLevelTrainer(vocab_size=128, special_tokens=special)
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=backend, unk_token="<unk>", pad_token="<pad>", bos_token="<s>", eos_token="</s>"
    )


def text_dataset(n: int = 64):
    from pydoc_data.topics import topics

    from datasets import Dataset

    return Dataset.from_dict({"text": [" ".join(v.split()[:20]) for _, v in sorted(topics.items())][:n]})


def preference_dataset(n: int = 16):
    from pydoc_data.topics import topics

    from datasets import Dataset

    words = [v.split() for _, v in sorted(topics.items())][:n]
    return Dataset.from_dict(
        {
            "prompt": [" ".join(w[:6]) for w in words],
            "chosen": [" " + " ".join(w[6:12]) for w in words],
            "rejected": [" " + " ".join(w[12:16]) for w in words],
        }
    )


def model(seed: int = 0):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        intermediate_size=64, vocab_size=128, max_position_embeddings=64,
        pad_token_id=1, bos_token_id=2, eos_token_id=3,
    )  # fmt: skip
    return LlamaForCausalLM(config)


def lora_config():
    from peft import LoraConfig

    return LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], lora_dropout=0.0)


def common_args(out: str, lora: bool) -> dict:
    per_device = 8 // WORLD  # the same 8 samples a step on 1 or 2 processes
    return dict(
        output_dir=out, max_steps=6, per_device_train_batch_size=per_device, per_device_eval_batch_size=4,
        logging_steps=1, save_steps=3, report_to="none", disable_tqdm=True,
        learning_rate=1e-2 if lora else 1e-3, gradient_checkpointing=False, bf16=False, use_cpu=True,
        seed=0, data_seed=0,
    )  # fmt: skip


def sft(scenario: str) -> object:
    from trl import SFTConfig, SFTTrainer

    lora = scenario.startswith("lora")
    out = os.path.join(ROOT, BACKEND, scenario)
    kwargs = common_args(out, lora)
    resume = None
    if scenario.endswith("_resume"):
        resume = os.path.join(ROOT, BACKEND, scenario.removesuffix("_resume"), "checkpoint-3")
    if scenario.endswith("_best"):  # the higher eval loss (step 3) is the best: a real load at the end
        kwargs.update(eval_strategy="steps", eval_steps=3, load_best_model_at_end=True,
                      metric_for_best_model="eval_loss", greater_is_better=True)  # fmt: skip
    data = text_dataset()
    trainer = SFTTrainer(
        model=model(), args=SFTConfig(max_length=32, **kwargs), train_dataset=data,
        eval_dataset=data.select(range(16)) if scenario.endswith("_best") else None,
        processing_class=tokenizer(), peft_config=lora_config() if lora else None,
    )  # fmt: skip
    trainer.train(resume_from_checkpoint=resume)
    return trainer


def dpo(scenario: str) -> object:
    from trl import DPOConfig, DPOTrainer

    out = os.path.join(ROOT, BACKEND, scenario)
    kwargs = common_args(out, lora=False)
    kwargs.update(per_device_train_batch_size=4 // WORLD, max_steps=4, save_steps=2)
    trainer = DPOTrainer(
        model=model(), ref_model=model(), args=DPOConfig(max_length=32, **kwargs),
        train_dataset=preference_dataset(),
        processing_class=tokenizer(),
    )  # fmt: skip
    trainer.train()
    return trainer


def short_args(scenario: str, steps: int) -> dict:
    """``common_args`` of a short run: ``steps`` steps of 4 samples, one checkpoint at the end."""
    kwargs = common_args(os.path.join(ROOT, BACKEND, scenario), lora=False)
    kwargs.update(per_device_train_batch_size=4 // WORLD, max_steps=steps, save_steps=steps)
    return kwargs


def trained(trainer) -> object:
    trainer.train()
    return trainer


def length_reward(completions, **kwargs) -> list[float]:
    """The reward of the generation scenarios: a completion's number of words."""
    return [float(len(completion.split())) for completion in completions]


def prompt_dataset():
    """16 prompts of 6 words (the generation scenarios)."""
    from datasets import Dataset

    return Dataset.from_dict({"prompt": [" ".join(line.split()[:6]) for line in text_dataset(16)["text"]]})


def grpo(scenario: str) -> object:
    """GRPOTrainer: generations, a reward, TRL's identity collator and ``set_seed(device_specific=True)``."""
    from trl import GRPOConfig, GRPOTrainer

    return trained(GRPOTrainer(
        model=model(), reward_funcs=length_reward, train_dataset=prompt_dataset(),
        args=GRPOConfig(num_generations=4, max_completion_length=8, **short_args(scenario, 2)),
        processing_class=tokenizer(),
    ))  # fmt: skip


def reward_model(scenario: str) -> object:
    """RewardTrainer on the preference pairs (a one-label sequence classifier)."""
    from transformers import LlamaConfig, LlamaForSequenceClassification
    from trl import RewardConfig, RewardTrainer

    torch.manual_seed(0)
    config = LlamaConfig(num_labels=1, **model().config.to_diff_dict())
    return trained(RewardTrainer(
        model=LlamaForSequenceClassification(config), args=RewardConfig(max_length=32, **short_args(scenario, 3)),
        train_dataset=preference_dataset(), processing_class=tokenizer(),
    ))  # fmt: skip


def kto(scenario: str) -> object:
    """KTOTrainer on the pairs unpaired (chosen: desirable, rejected: undesirable), with a reference model."""
    from datasets import Dataset
    from trl import KTOConfig, KTOTrainer

    pairs = preference_dataset()
    completions, labels = [*pairs["chosen"], *pairs["rejected"]], [True] * len(pairs) + [False] * len(pairs)
    data = Dataset.from_dict({"prompt": [*pairs["prompt"]] * 2, "completion": completions, "label": labels})
    return trained(KTOTrainer(
        model=model(), ref_model=model(), args=KTOConfig(max_length=32, **short_args(scenario, 3)),
        train_dataset=data, processing_class=tokenizer(),
    ))  # fmt: skip


def dpo_sync(scenario: str) -> object:
    """DPOTrainer with ``sync_ref_model`` (TRL's callback reads accelerate's ``AcceleratorState()``)."""
    from trl import DPOConfig, DPOTrainer

    args = DPOConfig(max_length=32, sync_ref_model=True, ref_model_sync_steps=1, **short_args(scenario, 3))
    return trained(DPOTrainer(
        model=model(), ref_model=model(), train_dataset=preference_dataset(), processing_class=tokenizer(),
        args=args,
    ))  # fmt: skip


def card(folder: str) -> dict:
    path = os.path.join(folder, "README.md")
    if not os.path.isfile(path):
        return {}
    text = open(path, encoding="utf-8").read()
    head, _, body = text.partition("\n---\n")
    lines = head.splitlines()
    tags = sorted(line.strip()[2:] for line in lines if line.startswith("- "))
    meta = sorted(line for line in lines if not line.startswith("- "))
    return {"tags": tags, "meta": meta, "body": body}


def report(scenario: str, trainer) -> None:
    out = os.path.join(ROOT, BACKEND, scenario)
    weights = {
        name: param.detach().cpu().contiguous()
        for name, param in trainer.model.named_parameters()
        if param.requires_grad
    }
    result = {
        "log_history": trainer.state.log_history,
        "best_model_checkpoint": trainer.state.best_model_checkpoint,
        "files": {
            d: sorted(os.listdir(os.path.join(out, d)))
            for d in sorted(os.listdir(out))
            if d.startswith("checkpoint-")
        },
        "card": card(out),
    }
    if RANK == 0:
        save_file(weights, os.path.join(out, f"{scenario}.safetensors"))
        with open(os.path.join(out, f"{scenario}.json"), "w", encoding="utf-8") as handle:
            json.dump(result, handle)


def report_error(scenario: str) -> None:
    """A scenario that raised: its traceback, for the test to show (the next scenarios still run)."""
    out = os.path.join(ROOT, BACKEND, scenario)
    os.makedirs(out, exist_ok=True)
    if RANK == 0:
        with open(os.path.join(out, f"{scenario}.json"), "w", encoding="utf-8") as handle:
            json.dump({"error": traceback.format_exc()}, handle)


def rloo(scenario: str) -> object:
    """RLOOTrainer: as ``grpo``, without a reference model (``beta=0``: TRL would load one by its hub name)."""
    from trl import RLOOConfig, RLOOTrainer

    return trained(RLOOTrainer(
        model=model(), reward_funcs=length_reward, train_dataset=prompt_dataset(),
        args=RLOOConfig(beta=0.0, num_generations=4, max_completion_length=8, **short_args(scenario, 2)),
        processing_class=tokenizer(),
    ))  # fmt: skip


def distill(scenario: str) -> object:
    """DistillationTrainer: the student generates, a teacher of other weights scores the completions."""
    from trl import DistillationConfig, DistillationTrainer

    return trained(DistillationTrainer(
        model=model(), teacher_model=model(seed=1), train_dataset=prompt_dataset(),
        args=DistillationConfig(max_completion_length=8, **short_args(scenario, 2)),
        processing_class=tokenizer(),
    ))  # fmt: skip


if __name__ == "__main__":
    for name in SCENARIOS:
        try:
            runs = {
                "dpo": dpo,
                "grpo": grpo,
                "reward": reward_model,
                "kto": kto,
                "dpo_sync": dpo_sync,
                "rloo": rloo,
                "distill": distill,
            }
            trainer = runs.get(name, sft)(name)
        except Exception:
            traceback.print_exc()
            report_error(name)
            continue
        report(name, trainer)
