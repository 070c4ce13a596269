"""sentence-transformers' ``SentenceTransformerTrainer`` on a tiny BERT: ``python st_worker.py BACKEND ROOT SCENARIO...``.

``BACKEND`` is ``transformers`` or ``hf_lightning`` (then ``hf_lightning.use_as_transformers_trainer()``
runs before ``sentence_transformers`` is imported). The BERT (2 layers, hidden size 32) is built from a
config with a WordLevel tokenizer trained on pydoc's topics and saved to a local folder, which
sentence-transformers' ``Transformer`` module loads (offline). Each scenario trains with
``MultipleNegativesRankingLoss`` on 64 (anchor, positive) pairs in ``ROOT/BACKEND/<scenario>`` and writes
``<scenario>.json`` (``log_history``, the checkpoint folders' files, the best checkpoint) and
``<scenario>.safetensors`` (the weights at the end). Scenarios: ``st`` (6 steps, checkpoints at 3 and 6),
``st_resume`` (resumes ``st``'s checkpoint-3), ``st_best`` (evaluation at 3 and 6, best model loaded);
``st_softmax`` trains ``SoftmaxLoss`` on labelled pairs instead: its classifier lives in the loss and reaches the
optimizer only through the trainer's ``get_optimizer_cls_and_kwargs`` override, with a
``learning_rate_mapping`` rate of its own (the loss's weights are written with the model's).
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


def base_model(folder: str) -> str:
    """A tiny BERT and its tokenizer saved to ``folder`` (sentence-transformers loads a model from a path)."""
    from pydoc_data.topics import topics

    from tokenizers import Tokenizer, models, pre_tokenizers, processors, trainers
    from transformers import BertConfig, BertModel, PreTrainedTokenizerFast

    backend = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    special = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    backend.train_from_iterator(
        list(topics.values()), trainers.WordLevelTrainer(vocab_size=256, special_tokens=special)
    )
    backend.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B [SEP]", special_tokens=[("[CLS]", 2), ("[SEP]", 3)]
    )
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]", sep_token="[SEP]",
        mask_token="[MASK]", model_max_length=32,
    )  # fmt: skip
    torch.manual_seed(0)
    config = BertConfig(vocab_size=256, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=64)  # fmt: skip
    BertModel(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def pairs(n: int = 64):
    from pydoc_data.topics import topics

    from datasets import Dataset

    words = [v.split() for _, v in sorted(topics.items())][:n]
    return Dataset.from_dict(
        {"anchor": [" ".join(w[:8]) for w in words], "positive": [" ".join(w[8:16]) for w in words]}
    )


def labelled_pairs(n: int = 64):
    data = pairs(n)
    return data.add_column("label", [i % 3 for i in range(len(data))])


def train(scenario: str):
    from sentence_transformers import SentenceTransformer, SentenceTransformerTrainer
    from sentence_transformers import SentenceTransformerTrainingArguments as Arguments
    from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss, SoftmaxLoss
    from sentence_transformers.sentence_transformer.modules import Pooling, Transformer

    out = os.path.join(ROOT, BACKEND, scenario)
    base = base_model(os.path.join(ROOT, BACKEND, f"{scenario}-base"))
    torch.manual_seed(0)
    encoder = Transformer(base, max_seq_length=32)
    model = SentenceTransformer(modules=[encoder, Pooling(encoder.get_embedding_dimension(), "mean")])
    kwargs = dict(output_dir=out, max_steps=6, per_device_train_batch_size=8, per_device_eval_batch_size=8,
                  logging_steps=1, save_steps=3, report_to="none", disable_tqdm=True, learning_rate=1e-3,
                  use_cpu=True, seed=0)  # fmt: skip
    if scenario == "st_best":
        kwargs.update(eval_strategy="steps", eval_steps=3, load_best_model_at_end=True,
                      metric_for_best_model="eval_loss", greater_is_better=True)  # fmt: skip
    data, loss = pairs(), MultipleNegativesRankingLoss(model)
    if scenario == "st_softmax":
        kwargs.update(learning_rate_mapping={r"classifier": 5e-3}, weight_decay=0.1)
        data, loss = (
            labelled_pairs(),
            SoftmaxLoss(model, model.get_sentence_embedding_dimension(), num_labels=3),
        )
    trainer = SentenceTransformerTrainer(
        model=model, args=Arguments(**kwargs), train_dataset=data, loss=loss,
        eval_dataset=data.select(range(16)) if scenario == "st_best" else None,
    )  # fmt: skip
    resume = os.path.join(ROOT, BACKEND, "st", "checkpoint-3") if scenario == "st_resume" else None
    trainer.train(resume_from_checkpoint=resume)
    return trainer


def report(scenario: str, trainer=None, error: str | None = None) -> None:
    out = os.path.join(ROOT, BACKEND, scenario)
    os.makedirs(out, exist_ok=True)
    result: dict = {"error": error} if error else {
        "log_history": trainer.state.log_history,
        "best_model_checkpoint": trainer.state.best_model_checkpoint,
        "files": {d: sorted(os.listdir(os.path.join(out, d))) for d in sorted(os.listdir(out)) if d.startswith("checkpoint-")},
        "card": {},
    }  # fmt: skip
    if trainer is not None:
        weights = {name: p.detach().cpu().contiguous() for name, p in trainer.model.named_parameters()}
        if isinstance(trainer.loss, torch.nn.Module):
            weights.update({f"loss.{name}": p.detach().cpu().contiguous()
                            for name, p in trainer.loss.named_parameters() if not name.startswith("model.")})  # fmt: skip
        save_file(weights, os.path.join(out, f"{scenario}.safetensors"))
    with open(os.path.join(out, f"{scenario}.json"), "w", encoding="utf-8") as handle:
        json.dump(result, handle)


if __name__ == "__main__":
    for name in SCENARIOS:
        try:
            report(name, train(name))
        except Exception:
            traceback.print_exc()
            report(name, error=traceback.format_exc())
