"""SLICE training on sentence-transformers' trainer: ``slice-st train`` and :func:`train`.

One function builds everything from a :class:`TrainConfig`: the base model (the embedded
all-MiniLM-L6-v2 by default), the training triplets (MS MARCO TSV, the offline builder, or a saved
``datasets`` folder) for :class:`~slice_st.SpanMaxCrossEntropyLoss`, unlabeled passages for
:class:`~slice_st.SpanDistillationLoss` (either or both: two datasets and two losses in one run), the
:class:`~slice_st.SpanRetrievalEvaluator` on an STS-B-Context dev file, and Hugging Face
``TrainingArguments`` (checkpoints every N steps, the best one kept by dev single-pass Spearman,
resume from the last checkpoint). It runs unchanged under ``accelerate launch`` (one process per
device; only the main process writes). Checkpoints are flag-free SLICE checkpoints (see
:func:`slice_st.save_slice_model`) with a SLICE model card (:mod:`slice_st.training.hub`: the same card
locally and on the Hub). ``push_to_hub`` uses the trainer's own Hub push (``hub_model_id``,
``hub_strategy``, ``hub_private_repo``), checked before anything is loaded or trained.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
from dataclasses import dataclass, field
from typing import Any

from slice_st.errors import MissingExtraError
from slice_st.text import require

logger = logging.getLogger(__name__)

#: ``TrainingArguments.hub_strategy`` values (``--hub-strategy``).
HUB_STRATEGIES = ("end", "every_save", "checkpoint", "all_checkpoints")
#: ``--distill-loss``: ``vector`` (SpanDistillationLoss); the score loss is a study in research/.
DISTILL_LOSSES = ("vector",)
#: ``--dev-select``: the dev rows that choose the best checkpoint.
DEV_SELECTIONS = ("all", "even", "odd")
#: ``--mix``: sentence-transformers' multi-dataset batch samplers.
MIXES = ("round_robin", "proportional")

#: Documented presets; explicit options override them.
PRESETS: dict[str, dict[str, Any]] = {
    # The shipped slice-minilm (make model): a LoRA adapter (r = 16, every linear layer) trained by span
    # self-distillation on the offline unlabeled passages, 16 spans of 1..20 words per passage (the benchmark's
    # span range); the best checkpoint is chosen on the even rows of the dev file (--dev), so its odd rows stay
    # unseen. 800 steps of 16 passages: a CPU run.
    "cpu-minilm-slice": {
        "distill_data": ["offline"],
        "lora_r": 16,
        "max_steps": 800,
        "batch_size": 16,
        "learning_rate": 3e-4,
        "warmup_ratio": 0.05,
        "distill_spans": 16,
        "distill_max_span": 20,
        "distill_text_weight": 0.0,
        "eval_steps": 200,
        "save_steps": 200,
        "dev_select": "even",
        "max_seq_length": 128,
    },
    # The same recipe for a GPU and a bigger corpus: add --distill-data YOUR_TEXT (files, JSONL, a datasets folder)
    # and --dev YOUR_DEV.tsv.
    "gpu-minilm-slice": {
        "distill_data": ["offline"],
        "lora_r": 16,
        "max_steps": 4000,
        "batch_size": 64,
        "learning_rate": 3e-4,
        "warmup_ratio": 0.05,
        "distill_spans": 16,
        "distill_max_span": 20,
        "distill_text_weight": 0.0,
        "eval_steps": 500,
        "save_steps": 500,
        "dev_select": "even",
        "max_seq_length": 256,
    },
    # SLICE triplets (SpanMaxCrossEntropyLoss) for all-MiniLM-L6-v2, a short CPU run.
    "cpu-minilm": {
        "max_steps": 200,
        "batch_size": 16,
        "learning_rate": 2e-5,
        "warmup_ratio": 0.1,
        "max_span": 10,
        "scale": 30.0,
        "eval_steps": 100,
        "save_steps": 100,
        "train_limit": 8000,
        "dev_limit": 256,
        "max_seq_length": 128,
    },
    # Span self-distillation only (no labels): the offline unlabeled passages, teacher = frozen base model.
    "cpu-minilm-distill": {
        "distill_data": ["offline"],
        "max_steps": 600,
        "batch_size": 16,
        "learning_rate": 5e-5,
        "warmup_ratio": 0.05,
        "distill_spans": 12,
        "distill_max_span": 20,
        "eval_steps": 200,
        "save_steps": 200,
        "dev_limit": 256,
        "max_seq_length": 128,
    },
    # SLICE triplets and distillation passages in one run; batches drawn in proportion to the sets' sizes
    # (3,200 triplets vs ~16,600 passages: about one SLICE batch in six).
    "cpu-minilm-both": {
        "train_data": ["offline"],
        "distill_data": ["offline"],
        "max_steps": 600,
        "batch_size": 16,
        "learning_rate": 5e-5,
        "warmup_ratio": 0.05,
        "max_span": 10,
        "scale": 30.0,
        "distill_spans": 12,
        "distill_max_span": 20,
        "mix": "proportional",
        "eval_steps": 200,
        "save_steps": 200,
        "train_limit": 3200,
        "dev_limit": 256,
        "max_seq_length": 128,
    },
}


@dataclass
class TrainConfig:
    """Everything ``slice-st train`` takes (see ``slice-st train --help``); the first arguments are the ones to set.

    Args:
        output_dir: Folder of the checkpoints and of ``final/`` (the best model).
        model: Base model id or path (``None``: the embedded all-MiniLM-L6-v2).
        train_data: SLICE triplets: ``msmarco:PATH``, ``offline[:DIR]`` or saved ``datasets`` folders.
        dev_path: STS-B-Context TSV of the evaluator; the best checkpoint is chosen by its single-pass Spearman.
        max_steps: Training steps.
        batch_size: Rows per device and step.
        learning_rate: Peak learning rate.
        warmup_ratio: Warm-up, as a fraction of ``max_steps``.
        weight_decay: AdamW weight decay.
        min_span: Shortest span, in units (training and the saved model).
        max_span: Longest span of the SLICE loss.
        eval_max_span: Longest span of the evaluator and of the saved model (the paper's 20 words).
        unit: ``"word"`` or ``"token"``.
        scale: λ of :class:`~slice_st.SpanMaxCrossEntropyLoss`.
        in_batch_negatives: The other rows' passages are extra negatives (SLICE loss).
        eval_steps: Evaluate every N steps.
        save_steps: Save a checkpoint every N steps (a multiple of ``eval_steps`` with ``dev_path``).
        save_total_limit: Checkpoints kept.
        logging_steps: Log every N steps.
        train_limit: Use the first N triplets.
        dev_limit: Use the first N dev rows.
        max_seq_length: The model's ``max_seq_length`` during training (``None``: keep).
        seed: Seed of data order, sampling and initialisation.
        resume: Continue from the last complete checkpoint in ``output_dir``.
        push_to_hub: Hub repository ``ORG/NAME`` to push to (checked before training).
        shared_data: Data folder for ``offline`` sources given without ``:DIR``.
        distill_data: Unlabeled text for :class:`~slice_st.SpanDistillationLoss`: ``offline[:DIR]``, text/TSV/JSONL
            files or saved passages folders.
        distill_weight: Weight of the distillation loss (with both losses).
        distill_spans: Spans drawn per passage.
        distill_max_span: Longest distilled span, in units.
        distill_metric: ``"cosine"`` or ``"mse"``.
        distill_text_weight: Weight of the whole-text term.
        teacher: Teacher model id or path (``None``: a frozen copy of the base model).
        cache_teacher: Precompute the teacher's span vectors once.
        passage_min_words: Shortest passage, in words.
        passage_max_words: Longest passage, in words.
        distill_limit: Use at most N passages.
        mix: How batches of the two datasets alternate: ``"round_robin"`` or ``"proportional"``.
        sts_dev_path: STS-B TSV: also report sentence similarity at each evaluation.
        lora_r: Rank of a LoRA adapter to train (0: every weight).
        lora_alpha: LoRA alpha (``None``: ``2 * lora_r``).
        dev_select: Dev rows that choose the best checkpoint: ``"all"``, ``"even"`` or ``"odd"``.
        no_progress: Hide progress bars.
        distill_loss: ``"vector"`` (:class:`~slice_st.SpanDistillationLoss`).
        hub_strategy: When the trainer pushes (``TrainingArguments.hub_strategy``).
        hub_private_repo: Create the Hub repository private.
        license: The model card's licence (``None``: chosen from the training data).

    Example:
        >>> config = TrainConfig("runs/distill", distill_data=["offline:DATA"], dev_path=None, max_steps=10)
        >>> config.objectives
        ('distill',)
    """

    output_dir: str
    model: str | None = None
    train_data: list[str] = field(default_factory=list)
    dev_path: str | None = None
    max_steps: int = 1000
    batch_size: int = 32
    learning_rate: float = 2e-5
    warmup_ratio: float = 0.1
    weight_decay: float = 0.01
    min_span: int = 1
    max_span: int = 10
    eval_max_span: int = 20
    unit: str = "word"
    scale: float = 30.0
    in_batch_negatives: bool = False
    eval_steps: int = 100
    save_steps: int = 100
    save_total_limit: int = 2
    logging_steps: int = 10
    train_limit: int | None = None
    dev_limit: int | None = None
    max_seq_length: int | None = None
    seed: int = 42
    resume: bool = False
    push_to_hub: str | None = None
    shared_data: str | None = None
    # span self-distillation (SpanDistillationLoss); on when distill_data is given
    distill_data: list[str] = field(default_factory=list)
    distill_weight: float = 1.0
    distill_spans: int = 8
    distill_max_span: int = 12
    distill_metric: str = "cosine"
    distill_text_weight: float = 1.0
    teacher: str | None = None
    cache_teacher: bool = False
    passage_min_words: int = 20
    passage_max_words: int = 80
    distill_limit: int | None = None
    mix: str = "round_robin"
    sts_dev_path: str | None = None
    # train a LoRA adapter instead of every weight (0: full fine-tune)
    lora_r: int = 0
    lora_alpha: float | None = None
    # the dev rows that choose the best checkpoint: all, or every other row ("even"/"odd"), so that the rest stays
    # unseen
    dev_select: str = "all"
    no_progress: bool = False
    # which distillation loss trains on the passages: "vector" (SpanDistillationLoss: the teacher's span vectors)
    distill_loss: str = "vector"
    # Hub push through the trainer (TrainingArguments.hub_strategy / hub_private_repo); the card's licence
    hub_strategy: str = "every_save"
    hub_private_repo: bool | None = None
    license: str | None = None

    @property
    def objectives(self) -> tuple[str, ...]:
        """Which losses this run trains: ``("slice",)``, ``("distill",)`` or both."""
        return tuple(name for name, data in (("slice", self.train_data), ("distill", self.distill_data)) if data)

    def validate(self, needs_train_data: bool = True) -> None:
        """Check every setting at once (a clear ``ValueError``/``FileNotFoundError`` before anything is loaded).

        Args:
            needs_train_data: Whether the config itself must name training data (not when a dataset is passed in).
        """
        if needs_train_data and not self.train_data and not self.distill_data:
            raise ValueError(
                "no training data: give --train-data (msmarco:PATH, offline[:DIR], or a saved dataset folder) and/or "
                "--distill-data (offline[:DIR], text/JSONL files, or a saved passages folder)."
            )
        if not self.shared_data and "offline" in self.train_data + self.distill_data:
            raise ValueError("offline training data needs the data folder: give offline:DIR or --shared-data DIR.")
        if self.distill_loss not in DISTILL_LOSSES:
            raise ValueError(f"distill_loss must be 'vector', got {self.distill_loss!r}.")
        if self.lora_r < 0:
            raise ValueError(f"lora_r must be >= 0 (0: full fine-tune), got {self.lora_r}.")
        if self.dev_select not in DEV_SELECTIONS:
            raise ValueError(f"dev_select must be 'all', 'even' or 'odd', got {self.dev_select!r}.")
        if self.mix not in MIXES:
            raise ValueError(f"mix must be 'round_robin' or 'proportional', got {self.mix!r}.")
        if self.hub_strategy not in HUB_STRATEGIES:
            raise ValueError(f"hub_strategy must be one of {', '.join(HUB_STRATEGIES)}, got {self.hub_strategy!r}.")
        if min(self.distill_weight, self.distill_text_weight) < 0:
            raise ValueError("distill weights must be >= 0.")
        if self.sts_dev_path is not None and not os.path.exists(self.sts_dev_path):
            raise FileNotFoundError(f"STS-B dev file not found: {self.sts_dev_path}")
        for name in ("max_steps", "batch_size", "eval_steps", "save_steps", "logging_steps"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}.")
        if self.dev_path is not None and not os.path.exists(self.dev_path):
            raise FileNotFoundError(f"dev file not found: {self.dev_path}")
        if self.dev_path is not None and self.save_steps % self.eval_steps:
            raise ValueError(
                f"save_steps ({self.save_steps}) must be a multiple of eval_steps ({self.eval_steps}) so that the best "
                "checkpoint can be chosen by the dev score."
            )


def load_training_data(config: TrainConfig):
    """The training triplets: ``msmarco:PATH`` (TSV), ``offline`` (built from the shared data), or a ``datasets``
    folder."""
    datasets = require("datasets", "train", "slice-st train")

    from slice_st.data.triplets import offline_training_triplets, read_msmarco_triples

    parts = []
    for source in config.train_data:
        if source.startswith("msmarco:"):
            parts.append(read_msmarco_triples(source.split(":", 1)[1]))
        elif source == "offline" or source.startswith("offline:"):
            data_dir = (
                source.split(":", 1)[1] if ":" in source else config.shared_data
            )  # checked by TrainConfig.validate
            dev = os.path.join(data_dir, "stsbenchmark", "sts-dev.csv")
            parts.append(
                offline_training_triplets(data_dir, dev_path=dev if os.path.exists(dev) else None, seed=config.seed)
            )
        elif os.path.isdir(source):
            parts.append(datasets.load_from_disk(source))
        else:
            raise FileNotFoundError(
                f"training data {source!r}: not msmarco:PATH, offline[:DIR], or a saved dataset folder."
            )
    dataset = datasets.concatenate_datasets([part.select_columns(["anchor", "positive", "negative"]) for part in parts])
    dataset = dataset.shuffle(seed=config.seed)
    if config.train_limit is not None:
        dataset = dataset.select(range(min(config.train_limit, len(dataset))))
    return dataset


def load_distillation_data(config: TrainConfig, loss=None):
    """Passages for :class:`~slice_st.SpanDistillationLoss` (dev sentences removed), with cached teacher vectors if
    asked."""
    from slice_st.data.passages import load_passages

    passages = load_passages(
        config.distill_data,
        shared_data=config.shared_data,
        exclude_paths=_excluded_paths(config),
        min_words=config.passage_min_words,
        max_words=config.passage_max_words,
        seed=config.seed,
        limit=config.distill_limit,
    )
    if config.cache_teacher and loss is not None and "label" not in passages.column_names:
        passages = loss.cache_teacher_vectors(passages, seed=config.seed)
    return passages


def _excluded_paths(config: TrainConfig) -> list[str]:
    """Evaluation files whose sentences never enter training text: the dev set, the STS-B dev option and the
    STS-B dev file of every data folder used (``--shared-data``, ``offline:DIR``)."""
    folders = [config.shared_data] + [
        source.split(":", 1)[1] for source in config.distill_data if source.startswith("offline:")
    ]
    candidates = [config.dev_path, config.sts_dev_path] + [
        os.path.join(f, "stsbenchmark", "sts-dev.csv") for f in folders if f
    ]
    return list(dict.fromkeys(path for path in candidates if path and os.path.exists(path)))


def build_trainer(config: TrainConfig, model=None, train_dataset=None, callbacks=None, hub_api=None):
    """The ``SentenceTransformerTrainer`` for ``config`` (model and data may be given directly).

    With ``config.push_to_hub`` the Hub is checked first (:func:`slice_st.training.hub.check_hub_access`;
    ``hub_api`` replaces ``huggingface_hub.HfApi()`` there), then the trainer pushes by itself.

    Args:
        config: The run's :class:`TrainConfig`.
        model: A ``SentenceTransformer`` (``None``: ``config.model``).
        train_dataset: A dataset (or ``DatasetDict`` with ``slice``/``distill``) instead of ``config``'s data.
        callbacks: Extra ``transformers`` trainer callbacks.
        hub_api: Replaces ``huggingface_hub.HfApi()`` for the Hub check.

    Returns:
        A ``SentenceTransformerTrainer``, not started.
    """
    from sentence_transformers import SentenceTransformerTrainer, SentenceTransformerTrainingArguments

    datasets = require("datasets", "train", "slice-st train")

    from slice_st.card import apply_model_card
    from slice_st.config import set_span_config
    from slice_st.loading import load_model
    from slice_st.losses.span_distillation import SpanDistillationLoss
    from slice_st.losses.span_max_cross_entropy import SpanMaxCrossEntropyLoss
    from slice_st.training.hub import check_hub_access

    config.validate(needs_train_data=train_dataset is None)
    if (
        config.push_to_hub and os.environ.get("RANK", "0") == "0"
    ):  # before loading anything: fail now, not at the first save
        check_hub_access(config.push_to_hub, private=config.hub_private_repo, api=hub_api)
    model = (
        model if model is not None else load_model(config.model or "base")
    )  # recipes start from the plain base model
    if config.max_seq_length is not None:
        model.max_seq_length = config.max_seq_length
    # Saved checkpoints search spans like the paper's evaluation (1..20 words); training uses max_span.
    set_span_config(model, min_span=config.min_span, max_span=config.eval_max_span, unit=config.unit)
    given = train_dataset
    objectives = config.objectives if given is None else _given_objectives(given)
    losses: dict[str, Any] = {}
    if "slice" in objectives:
        losses["slice"] = SpanMaxCrossEntropyLoss(
            model,
            scale=config.scale,
            min_span=config.min_span,
            max_span=config.max_span,
            unit=config.unit,
            in_batch_negatives=config.in_batch_negatives,
            gather_across_devices=config.in_batch_negatives,
        )
    if "distill" in objectives:  # the teacher is a frozen copy of the model as it is now, before training
        losses["distill"] = SpanDistillationLoss(
            model,
            teacher=config.teacher,
            spans_per_text=config.distill_spans,
            min_span=config.min_span,
            max_span=config.distill_max_span,
            unit=config.unit,
            metric=config.distill_metric,
            text_weight=config.distill_text_weight,
            weight=config.distill_weight,
            seed=config.seed,
        )
    if config.lora_r:  # after the distillation teacher was copied: it stays the plain base model
        _add_lora(model, config.lora_r, config.lora_alpha)
    if given is None:
        parts = {}
        if "slice" in losses:
            parts["slice"] = load_training_data(config)
        if "distill" in losses:
            parts["distill"] = load_distillation_data(config, losses["distill"])
        train_dataset = parts[objectives[0]] if len(parts) == 1 else datasets.DatasetDict(parts)
    loss = losses[objectives[0]] if len(losses) == 1 else losses
    evaluator = _dev_evaluator(config)
    card_config = (
        config
        if given is None
        else dataclasses.replace(
            config,
            train_data=config.train_data or (["local"] if "slice" in objectives else []),
            distill_data=config.distill_data or (["local"] if "distill" in objectives else []),
        )
    )
    order = (
        list(train_dataset.keys()) if isinstance(train_dataset, dict) else list(objectives[:1])
    )  # the trainer's datasets, in order
    apply_model_card(model, card_config, repo_id=config.push_to_hub, trainer_datasets=order)
    args = SentenceTransformerTrainingArguments(
        output_dir=config.output_dir,
        max_steps=config.max_steps,
        per_device_train_batch_size=config.batch_size,
        learning_rate=config.learning_rate,
        warmup_steps=config.warmup_ratio,  # transformers 5: a float below 1 is a ratio of max_steps
        weight_decay=config.weight_decay,
        eval_strategy="steps" if evaluator is not None else "no",  # evaluator: dev spans, STS-B dev, or both
        eval_on_start=evaluator is not None,  # the base model's dev score, for before/after
        eval_steps=config.eval_steps,
        save_strategy="steps",
        save_steps=config.save_steps,
        save_total_limit=config.save_total_limit,
        load_best_model_at_end=config.dev_path is not None,
        metric_for_best_model="eval_dev_single_spearman" if config.dev_path is not None else None,
        greater_is_better=True,
        logging_steps=config.logging_steps,
        seed=config.seed,
        report_to=[],
        dataloader_drop_last=config.in_batch_negatives,
        multi_dataset_batch_sampler=config.mix,
        disable_tqdm=config.no_progress or None,
        push_to_hub=bool(config.push_to_hub),
        hub_model_id=config.push_to_hub,
        # A LoRA run's saves hold only the adapter, which must never reach the model repo (ST would load it as an
        # adapter of its base): push once, at the end, the merged model.
        hub_strategy="end" if config.lora_r else config.hub_strategy,
        hub_private_repo=config.hub_private_repo,
        # Without an accelerator, accelerate only forms a (gloo) process group across CPU processes when told so.
        use_cpu=not _has_accelerator(),
    )
    callbacks = list(callbacks or [])
    return SentenceTransformerTrainer(
        model=model, args=args, train_dataset=train_dataset, loss=loss, evaluator=evaluator, callbacks=callbacks
    )


def _add_lora(model, rank: int, alpha: float | None) -> None:
    """Attach a fresh LoRA adapter (every linear layer of the encoder) through sentence-transformers'
    ``add_adapter``; a transformers release that refuses the installed peft is one clear error."""
    peft = require("peft", "train", "--lora-r (LoRA training)")
    config = peft.LoraConfig(
        r=rank, lora_alpha=alpha if alpha is not None else 2 * rank, lora_dropout=0.0, target_modules="all-linear"
    )
    try:
        model.add_adapter(config)
    except ValueError as error:
        if "version of PEFT" not in str(error):
            raise
        import transformers

        raise MissingExtraError(
            f"LoRA training (--lora-r) cannot run on transformers {transformers.__version__} with peft "
            f"{peft.__version__}: {error}; pip install 'slice-st[train]' installs a pair that works",
            name="peft",
        ) from None


def save_adapter(model, path: str) -> str:
    """Write the model's LoRA adapter alone (``adapter_config.json`` + ``adapter_model.safetensors``) to ``path``."""
    import json as _json

    transformer = next(module.auto_model for module in model if getattr(module, "auto_model", None) is not None)
    transformer.save_pretrained(path)
    config_path = os.path.join(path, "adapter_config.json")
    with open(config_path, encoding="utf-8") as handle:
        adapter_config = _json.load(handle)
    base = adapter_config.get("base_model_name_or_path") or ""
    if os.path.isabs(base):  # no local paths in what may be published
        from slice_st.loading import DEFAULT_MODEL_NAME, default_model_path

        same = os.path.isdir(base) and os.path.samefile(base, default_model_path())
        adapter_config["base_model_name_or_path"] = DEFAULT_MODEL_NAME if same else os.path.basename(base.rstrip("/"))
        with open(config_path, "w", encoding="utf-8") as handle:
            _json.dump(adapter_config, handle, indent=2, sort_keys=True)
    return path


def _has_accelerator() -> bool:
    import torch

    return torch.accelerator.is_available()


def _given_objectives(dataset) -> tuple[str, ...]:
    """Objectives of a dataset passed in: a ``DatasetDict`` names them (``slice``/``distill``); a lone dataset is
    SLICE triplets unless it is a one-column (``text``) passages set."""
    if isinstance(dataset, dict):
        unknown = set(dataset) - {"slice", "distill"}
        if unknown:
            raise ValueError(f"training DatasetDict keys must be 'slice' and/or 'distill', got {sorted(unknown)}.")
        return tuple(name for name in ("slice", "distill") if name in dataset)
    columns = [column for column in dataset.column_names if column != "label"]
    return ("distill",) if columns == ["text"] else ("slice",)


def sts_evaluator(path: str, name: str = "sts-dev"):
    """sentence-transformers' ``EmbeddingSimilarityEvaluator`` on an STS-B file (scores scaled to 0-1)."""
    from sentence_transformers.sentence_transformer.evaluation import EmbeddingSimilarityEvaluator

    from slice_st.data.stsb import read_stsb

    sts = read_stsb(path)
    return EmbeddingSimilarityEvaluator(
        list(sts["sentence1"]),
        list(sts["sentence2"]),
        [score / 5 for score in sts["score"]],
        name=name,
        write_csv=False,
    )


def _dev_evaluator(config: TrainConfig):
    evaluators = []
    if config.dev_path is not None:
        from slice_st.data.stsb import read_stsb_context
        from slice_st.evaluation.span_retrieval import SpanRetrievalEvaluator

        dev = read_stsb_context(config.dev_path)
        if config.dev_select != "all":  # every other row: files such as STS-B-Context are ordered by genre
            dev = dev.select(range(0 if config.dev_select == "even" else 1, len(dev), 2))
        if config.dev_limit is not None:
            dev = dev.select(range(min(config.dev_limit, len(dev))))
        evaluators.append(
            SpanRetrievalEvaluator.from_dataset(
                dev,
                setups=("single",),
                min_span=config.min_span,
                max_span=config.eval_max_span,
                unit=config.unit,
                name="dev",
            )
        )
    if config.sts_dev_path is not None:  # sentence-level similarity, to see that it is kept
        evaluators.append(sts_evaluator(config.sts_dev_path))
    if not evaluators:
        return None
    if len(evaluators) == 1:
        return evaluators[0]
    from sentence_transformers.base.evaluation import SequentialEvaluator

    return SequentialEvaluator(evaluators, main_score_function=lambda scores: scores[0])


def check_train_output(output_dir: str, *, resume: bool = False, overwrite: bool = False) -> str:
    """Check, before any work, that a run may write into ``output_dir``; returns it.

    A new or empty folder is fine. A folder with files in it (an earlier run's ``checkpoint-*`` and
    ``final/``, or anything else) is refused unless ``resume`` (continue that run) or ``overwrite``
    (the trainer may then replace and rotate what is there). A symbolic link (even with ``resume``), a
    file, a path under a file or an unwritable parent is a :class:`slice_st.errors.FileAccessError` too.

    Args:
        output_dir: The run's folder (``slice-st train -o``).
        resume: The run continues from its last checkpoint (``--resume``).
        overwrite: Write into a folder that has files in it (``--overwrite``).

    Returns:
        ``output_dir``.

    Example:
        >>> check_train_output("runs/new-run")  # doctest: +SKIP
        'runs/new-run'
    """
    from slice_st.errors import FileAccessError
    from slice_st.text import check_creatable, check_not_link

    check_not_link(output_dir, purpose="for the run")  # nothing is written, rotated or deleted through a link
    if os.path.exists(output_dir):
        if not os.path.isdir(output_dir):
            raise FileAccessError(f"output {output_dir} is a file, not a folder.")
        if not os.access(output_dir, os.W_OK | os.X_OK):
            raise FileAccessError(f"output {output_dir} is not writable (permission denied).")
        if os.listdir(output_dir) and not (resume or overwrite):
            raise FileAccessError(
                f"output {output_dir} is not empty (its checkpoints and final/ would be replaced): name a new "
                "folder, continue that run with --resume, or pass --overwrite."
            )
        return output_dir
    check_creatable(output_dir)
    return output_dir


def train(
    config: TrainConfig, model=None, train_dataset=None, callbacks=None, hub_api=None, *, overwrite: bool = False
):
    """Train, save the final (best) model to ``output_dir/final`` and return the model.

    ``output_dir`` must be new or empty unless ``config.resume`` or ``overwrite`` (see :func:`check_train_output`).
    With ``config.push_to_hub`` the Hub access is checked before anything else (``hub_api`` replaces
    ``huggingface_hub.HfApi()`` for that check); the trainer pushes on its ``hub_strategy`` and, at the
    end, ``trainer.push_to_hub()`` uploads the final model with its card.

    Args:
        config: The run's :class:`TrainConfig`.
        model: A ``SentenceTransformer`` to train (``None``: ``config.model``).
        train_dataset: A dataset (or ``DatasetDict`` with ``slice``/``distill``) instead of ``config``'s data.
        callbacks: Extra ``transformers`` trainer callbacks.
        hub_api: Replaces ``huggingface_hub.HfApi()`` for the Hub check (tests).

    Returns:
        The trained (best) model, also saved to ``output_dir/final``.
    """
    import sys

    from slice_st.loading import save_slice_model

    if int(os.environ.get("RANK", "0")) == 0:  # under accelerate the other ranks start as rank 0 writes
        check_train_output(config.output_dir, resume=config.resume, overwrite=overwrite)

    trainer = build_trainer(config, model, train_dataset, callbacks, hub_api)
    checkpoint = last_complete_checkpoint(config.output_dir) if config.resume else None
    if config.resume and checkpoint is None:
        logger.warning("--resume: no complete checkpoint in %s yet, starting from scratch.", config.output_dir)
    if checkpoint is not None:
        check_checkpoint_state(checkpoint)
    result = trainer.train(resume_from_checkpoint=checkpoint)
    model = trainer.model
    checksum = sum(float(parameter.detach().double().sum()) for parameter in model.parameters())
    # One line per process (under accelerate every rank reports, and synced ranks share the checksum), written in one
    # call so that the ranks' lines cannot interleave (print writes the text and the newline separately).
    sys.stderr.write(
        f"[rank {trainer.args.process_index}/{trainer.args.world_size}] trained to step {trainer.state.global_step}, "
        f"mean loss {result.training_loss:.4f}, parameter checksum {checksum:.6f}\n"
    )
    sys.stderr.flush()
    final = os.path.join(config.output_dir, "final")
    # The trainer's push uploads output_dir except names starting with "_" and checkpoints: the new final/ is
    # written under "_final.new" (and an earlier run's final/ parked as "_final.old") until the push is done.
    staged, parked = os.path.join(config.output_dir, "_final.new"), os.path.join(config.output_dir, "_final.old")
    if trainer.is_world_process_zero():
        for folder in (staged, parked):
            _remove_run_folder(folder)
        save_slice_model(model, staged)
        with open(os.path.join(staged, "slice_train_config.json"), "w", encoding="utf-8") as handle:
            json.dump(dataclasses.asdict(config), handle, indent=2)
    try:
        if config.push_to_hub:
            if trainer.is_world_process_zero() and os.path.isdir(final):
                os.replace(final, parked)
            from slice_st.loading import has_adapters, merged_adapters

            if has_adapters(model):  # push the merged, flag-free model, not the trainer's adapter-only save
                trainer.model = merged_adapters(model)
                for name in ("adapter_config.json", "adapter_model.safetensors"):  # left by the trainer's own saves
                    if trainer.is_world_process_zero() and os.path.exists(os.path.join(config.output_dir, name)):
                        os.remove(os.path.join(config.output_dir, name))
            trainer.push_to_hub(commit_message="Final SLICE model")  # model files and the card, from output_dir
    finally:
        if trainer.is_world_process_zero():
            _remove_run_folder(final)
            os.replace(staged, final)
            _remove_run_folder(parked)
            from slice_st.loading import has_adapters

            if has_adapters(model):  # after the push: the adapter alone is a local by-product, not the pushed model
                save_adapter(model, os.path.join(config.output_dir, "adapter"))
    return model


def _remove_run_folder(path: str) -> None:
    """Remove a folder of the run (``final``, ``_final.new``, ``_final.old``): a symbolic link there is removed as a
    link, never followed (a user's folder it points to keeps its files)."""
    import shutil

    if os.path.islink(path) or os.path.isfile(path):
        os.unlink(path)
    else:
        shutil.rmtree(path, ignore_errors=True)


#: The files of a checkpoint that ``Trainer`` reads back on resume with ``torch.load(weights_only=True)``.
RESUMED_STATE_FILES = ("optimizer.pt", "scheduler.pt", "scaler.pt", "rng_state.pth")


def check_checkpoint_state(checkpoint: str) -> None:
    """Check that the optimizer, scheduler, scaler and RNG states of ``checkpoint`` load as plain tensor data.

    Each file is read as the trainer reads it on resume (``torch.load(weights_only=True)``: a pickle that would
    run code is refused, never executed), so a damaged or foreign file is one clear error before training
    starts instead of a traceback in the middle of ``Trainer.train``. (``training_args.bin`` is not read on resume.)

    Args:
        checkpoint: a ``checkpoint-N`` folder.

    Raises:
        ValueError: naming the file, its checkpoint and what to do.

    Example:
        >>> check_checkpoint_state("runs/slice/checkpoint-200")  # doctest: +SKIP
    """
    import glob
    import pickle

    import torch
    from transformers.trainer_pt_utils import (
        safe_globals,
    )  # the numpy types rng_state.pth holds, as the trainer allows them

    names = [name for name in RESUMED_STATE_FILES if os.path.exists(os.path.join(checkpoint, name))]
    names += sorted(
        os.path.basename(path) for path in glob.glob(os.path.join(glob.escape(checkpoint), "rng_state_*.pth"))
    )
    for name in names:
        path = os.path.join(checkpoint, name)
        try:
            with safe_globals():
                torch.load(path, map_location="cpu", weights_only=True)
        except (
            pickle.UnpicklingError,
            EOFError,
            RuntimeError,
            ValueError,
            OSError,
            AttributeError,
            TypeError,
            KeyError,
        ) as error:
            why = " ".join(str(error).split())[:200] or type(error).__name__
            raise ValueError(
                f"--resume: {path} is damaged or not plain tensor data ({why}); nothing of it was run. Delete "
                f"{checkpoint} to resume from an earlier checkpoint, or train without --resume."
            ) from None


def last_complete_checkpoint(output_dir: str) -> str | None:
    """The newest *complete* checkpoint of a run: a run killed mid-save leaves a newer folder without its
    ``trainer_state.json`` (written last), which must not be resumed from."""
    import re

    if not os.path.isdir(output_dir):
        return None
    steps = sorted(
        (int(match.group(1)), name)
        for name in os.listdir(output_dir)
        if (match := re.fullmatch(r"checkpoint-(\d+)", name))
        and os.path.isfile(os.path.join(output_dir, name, "trainer_state.json"))
    )
    return os.path.join(output_dir, steps[-1][1]) if steps else None


def config_from_args(args: argparse.Namespace) -> TrainConfig:
    """A :class:`TrainConfig` from parsed ``slice-st train`` options: the preset's values, then every option given.

    Args:
        args: Parsed ``slice-st train`` options.

    Returns:
        The :class:`TrainConfig`.
    """
    values: dict[str, Any] = dict(PRESETS.get(args.preset, {})) if args.preset else {}
    for item in dataclasses.fields(TrainConfig):
        value = getattr(args, item.name, None)
        if value is not None:
            values[item.name] = value
    return TrainConfig(**values)
