"""SLICE training on sentence-transformers' trainer (:func:`train`, ``slice-st train``): the trainer's own
``SentenceTransformerTrainingArguments`` plus :class:`SliceArguments`."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, get_args, get_origin, get_type_hints

from slice_st._extras import needs_extra
from slice_st.errors import DataFormatError, MissingExtraError, SpanInputError

if TYPE_CHECKING:
    from sentence_transformers import (
        SentenceTransformer,
        SentenceTransformerTrainer,
        SentenceTransformerTrainingArguments,
    )

logger = logging.getLogger(__name__)

#: Where ``slice-st train`` starts when neither a preset nor an option says otherwise (the trainer's own defaults
#: suit epochs of a labelled set; a SLICE run is counted in steps and checks its dev score every 100).
TRAINING_DEFAULTS: dict[str, Any] = {
    "max_steps": 1000,
    "per_device_train_batch_size": 32,
    "learning_rate": 2e-5,
    "warmup_steps": 0.1,  # transformers 5: a float below 1 is a ratio of max_steps
    "weight_decay": 0.01,
    "eval_steps": 100,
    "save_steps": 100,
    "save_total_limit": 2,
    "logging_steps": 10,
    "seed": 42,
    "multi_dataset_batch_sampler": "round_robin",
}

#: ``slice-st train --preset NAME`` (``presets/``; options given with it override it): ``cpu-minilm`` (SLICE triplets,
#: a short CPU run) and ``gpu-minilm-slice`` (slice-minilm's recipe: LoRA, span self-distillation; add --distill-data).
PRESETS: dict[str, dict[str, Any]] = {
    path.stem: json.loads(path.read_text(encoding="utf-8"))
    for path in sorted(Path(__file__).with_name("presets").glob("*.json"))
}


def _option(text: str, default: Any = None, **metadata: Any):
    """A :class:`SliceArguments` field: its default and its ``--help`` text."""
    default_value = {"default_factory": list} if isinstance(default, list) else {"default": default}
    return field(**default_value, metadata={"help": text, **metadata})


@dataclass
class SliceArguments:
    """The SLICE settings of a run, beside the trainer's ``SentenceTransformerTrainingArguments``; both are read by
    ``HfArgumentParser`` (``slice-st train``) and each field's ``--help`` text is in its metadata.

    Args:
        model: Base model id or path (``None``: the embedded all-MiniLM-L6-v2).
        train_data: SLICE triplets for :class:`~slice_st.SpanMaxCrossEntropyLoss`.
        distill_data: Unlabeled text for :class:`~slice_st.SpanDistillationLoss`.
        dev: STS-B-Context TSV whose single-pass Spearman chooses the best checkpoint.
        sts_dev: STS-B TSV, also scored at each evaluation.

    The other fields, by group (each field's ``--help`` text says more): which dev rows choose, resuming and
    overwriting (``dev_select``, ``resume``, ``overwrite``); spans and the SLICE loss (``min_span``, ``max_span``,
    ``eval_max_span``, ``unit``, ``scale``, ``in_batch_negatives``); span self-distillation (``distill_weight``,
    ``distill_spans``, ``distill_max_span``, ``distill_metric``, ``distill_text_weight``, ``teacher``,
    ``cache_teacher``); data sizes (``passage_min_words``, ``passage_max_words``, ``train_limit``, ``dev_limit``,
    ``distill_limit``, ``max_seq_length``); a LoRA adapter instead of every weight, on the top ``lora_layers`` layers
    only when > 0 (``lora_r``, ``lora_alpha``, ``lora_layers``), and the model card's ``license``.

    Example:
        >>> SliceArguments(distill_data=["notes.txt"]).objectives
        ('distill',)
    """

    # HfArgumentParser's --help group
    _argument_group_name = "SLICE settings (slice_st.training.SliceArguments)"

    model: str | None = _option(
        "base model id or path (default: the embedded all-MiniLM-L6-v2)", aliases=["-m"]
    )
    train_data: list[str] = _option(
        "SLICE triplets: msmarco:PATH (a query/positive/negative TSV) | a datasets folder", []
    )
    distill_data: list[str] = _option(
        "unlabeled text for span self-distillation: text/TSV/JSONL files, folders or globs (read as mine reads them) "
        "| a make-passages folder",
        [],
    )
    dev: str | None = _option("STS-B-Context TSV: the evaluator that chooses the best checkpoint")
    sts_dev: str | None = _option(
        "STS-B TSV: also report sentence similarity (Spearman) at each evaluation"
    )
    dev_select: Literal["all", "even", "odd"] = _option(
        "dev rows that choose the best checkpoint", "all"
    )
    dev_limit: int | None = _option("use the first N dev rows")
    resume: bool = _option("continue from the last complete checkpoint in the output folder", False)
    overwrite: bool = _option("train into an output folder that already has files", False)
    min_span: int = _option("shortest span, in units (training and the saved model)", 1)
    max_span: int = _option("longest span of the SLICE loss", 10)
    eval_max_span: int = _option("longest span of the evaluator and of the saved model", 20)
    train_limit: int | None = _option("use the first N triplets")
    unit: Literal["word", "token"] = _option("span unit", "word")
    scale: float = _option("λ of SpanMaxCrossEntropyLoss", 30.0)
    in_batch_negatives: bool = _option(
        "the other rows' passages are extra negatives (SLICE loss)", False
    )
    teacher: str | None = _option("teacher id or path (default: a frozen copy of the base model)")
    distill_weight: float = _option("weight of the distillation loss (with both losses)", 1.0)
    distill_spans: int = _option("spans drawn per passage", 8)
    distill_max_span: int = _option("longest distilled span, in units", 12)
    distill_metric: Literal["cosine", "mse"] = _option("how span vectors are compared", "cosine")
    distill_limit: int | None = _option("use at most N passages")
    distill_text_weight: float = _option("weight of the whole-text term", 1.0)
    cache_teacher: bool = _option("precompute the teacher's span vectors once", False)
    passage_min_words: int = _option("shortest passage, in words", 20)
    passage_max_words: int = _option("longest passage, in words", 80)
    max_seq_length: int | None = _option(
        "the model's max_seq_length during training (default: keep)"
    )
    lora_r: int = _option("rank of a LoRA adapter to train (0: every weight)", 0)
    lora_alpha: float | None = _option("LoRA alpha (default: 2 x lora_r)")
    lora_layers: int = _option("LoRA on the top N transformer layers only (0: every layer)", 0)
    license: str | None = _option(
        "the model card's licence (default: chosen from the training data)"
    )

    @property
    def objectives(self) -> tuple[str, ...]:
        """Which losses this run trains: ``("slice",)``, ``("distill",)`` or both."""
        return tuple(
            name
            for name, data in (("slice", self.train_data), ("distill", self.distill_data))
            if data
        )

    def check(self, args, needs_train_data: bool = True) -> None:
        """Check every setting, with the trainer's ``args``, before anything is loaded (a clear error)."""
        if needs_train_data and not self.objectives:
            raise SpanInputError(
                "no training data: give --train-data (triplets) and/or --distill-data (texts)."
            )
        for name, kind in get_type_hints(SliceArguments).items():
            if get_origin(kind) is Literal and getattr(self, name) not in get_args(kind):
                raise SpanInputError(
                    f"{name} must be one of {', '.join(get_args(kind))}, got {getattr(self, name)!r}."
                )
        if self.lora_r < 0:
            raise SpanInputError(f"lora_r must be >= 0 (0: full fine-tune), got {self.lora_r}.")
        if self.lora_layers < 0 or (self.lora_layers and not self.lora_r):
            raise SpanInputError(
                f"lora_layers must be >= 0 and needs lora_r > 0, got {self.lora_layers}."
            )
        for path in (self.dev, self.sts_dev):
            if path is not None and not os.path.exists(path):
                raise FileNotFoundError(f"dev file not found: {path}")
        counts = "max_steps per_device_train_batch_size eval_steps save_steps logging_steps"
        for name in counts.split():
            if (getattr(args, name) or 0) < 1:
                raise SpanInputError(f"{name} must be >= 1, got {getattr(args, name)}.")
        if self.dev is not None and args.save_steps % args.eval_steps:
            raise SpanInputError(
                f"save_steps ({args.save_steps}) must be a multiple of eval_steps ({args.eval_steps}) so that the best "
                "checkpoint can be chosen by the dev score."
            )


def training_arguments(
    preset: str | None = None, **values: Any
) -> tuple[SentenceTransformerTrainingArguments, SliceArguments]:
    """The two halves of a run, ``(SentenceTransformerTrainingArguments, SliceArguments)``: :data:`TRAINING_DEFAULTS`,
    then the ``preset``'s, then ``values``.

    Args:
        preset: A name of :data:`PRESETS` (``None``: none).
        values: Settings of either half, by field name (``output_dir``, ``max_steps``, ``distill_data``, …).

    Returns:
        ``(args, settings)`` for :func:`train`.

    Example:
        >>> args, settings = training_arguments("cpu-minilm", output_dir="runs/x", train_data=["msmarco:t.tsv"])
        >>> args.max_steps, settings.objectives
        (200, ('slice',))
    """
    from sentence_transformers import SentenceTransformerTrainingArguments
    from transformers import HfArgumentParser

    if preset is not None and preset not in PRESETS:
        raise SpanInputError(
            f"unknown preset {preset!r}; choose from {', '.join(sorted(PRESETS))}."
        )
    parser = HfArgumentParser((SliceArguments, SentenceTransformerTrainingArguments))
    settings, args = parser.parse_dict({**TRAINING_DEFAULTS, **PRESETS.get(preset, {}), **values})
    return args, settings


def load_training_data(settings: SliceArguments, seed: int):
    """The training triplets, shuffled: ``msmarco:PATH`` (a query/positive/negative TSV) or ``datasets`` folders."""
    with needs_extra("train", "slice-st train"):
        import datasets

    from slice_st.data.triplets import read_msmarco_triples

    parts = []
    for source in settings.train_data:
        if source.startswith("msmarco:"):
            parts.append(read_msmarco_triples(source.split(":", 1)[1]))
        elif os.path.isdir(source):
            parts.append(datasets.load_from_disk(source))
        else:
            raise FileNotFoundError(
                f"training data {source!r}: not msmarco:PATH or a saved dataset folder."
            )
    columns = ["anchor", "positive", "negative"]
    dataset = datasets.concatenate_datasets([part.select_columns(columns) for part in parts])
    return first_rows(dataset.shuffle(seed=seed), settings.train_limit)


def first_rows(dataset, limit: int | None):
    """The first ``limit`` rows of ``dataset`` (all with ``None``)."""
    return dataset if limit is None else dataset.select(range(min(limit, len(dataset))))


def evaluation_files(settings: SliceArguments, *more: str | None) -> list[str]:
    """The dev files (and ``more``) that exist: their sentences never enter training text."""
    paths = (settings.dev, settings.sts_dev, *more)
    return list(dict.fromkeys(path for path in paths if path and os.path.exists(path)))


def load_distillation_data(settings: SliceArguments, seed: int, loss):
    """Passages for ``loss`` (dev sentences removed), with its teacher's vectors if ``cache_teacher``."""
    from slice_st.data.passages import load_passages

    words: dict[str, Any] = {"min_words": settings.passage_min_words}
    words["max_words"] = settings.passage_max_words
    excluded = evaluation_files(settings)
    passages = load_passages(settings.distill_data, exclude_paths=excluded, seed=seed, **words)
    passages = first_rows(passages, settings.distill_limit)
    if len(passages) == 0:  # the trainer's sampler would fail on it with a bare ValueError
        raise DataFormatError(
            f"--distill-data {' '.join(map(str, settings.distill_data))} gives no passage of "
            f"{settings.passage_min_words} to {settings.passage_max_words} words: give more text, or lower "
            "--passage-min-words."
        )
    if settings.cache_teacher and "label" not in passages.column_names:
        passages = loss.cache_teacher_vectors(passages, seed=seed)
    return passages


def _losses(
    model: SentenceTransformer, settings: SliceArguments, objectives: tuple[str, ...], seed: int
) -> dict[str, Any]:
    from slice_st.losses import SpanDistillationLoss, SpanMaxCrossEntropyLoss

    # keyword options of both losses (typed as Any: each loss checks its own)
    spans: dict[str, Any] = {"min_span": settings.min_span, "unit": settings.unit}
    negatives = settings.in_batch_negatives
    losses: dict[str, Any] = {}
    if "slice" in objectives:
        batch = dict(in_batch_negatives=negatives, gather_across_devices=negatives, **spans)
        losses["slice"] = SpanMaxCrossEntropyLoss(
            model, settings.scale, max_span=settings.max_span, **batch
        )
    # the teacher is a frozen copy of the model as it is now, before training
    if "distill" in objectives:
        distill: dict[str, Any] = dict(max_span=settings.distill_max_span, **spans)
        distill |= dict(metric=settings.distill_metric, text_weight=settings.distill_text_weight)
        distill["weight"] = settings.distill_weight
        losses["distill"] = SpanDistillationLoss(
            model, settings.teacher, settings.distill_spans, seed=seed, **distill
        )
    return losses


def _run_arguments(args, settings: SliceArguments, evaluator):
    """The trainer's arguments with what a SLICE run decides itself (evaluation, best checkpoint, Hub, CPU)."""
    import torch

    return dataclasses.replace(
        args,
        eval_strategy="steps" if evaluator is not None else "no",
        eval_on_start=evaluator is not None,  # the base model's dev score, for before/after
        save_strategy="steps",
        load_best_model_at_end=settings.dev is not None,
        metric_for_best_model="eval_dev_single_spearman" if settings.dev is not None else None,
        greater_is_better=True,
        dataloader_drop_last=settings.in_batch_negatives or args.dataloader_drop_last,
        # A LoRA run's saves hold only the adapter, which must never reach the model repo (ST would load it as an
        # adapter of its base): push once, at the end, the merged model.
        hub_strategy="end" if settings.lora_r else args.hub_strategy,
        # Without an accelerator, accelerate only forms a (gloo) process group across CPU processes when told so.
        use_cpu=args.use_cpu or not torch.accelerator.is_available(),
    )


def build_trainer(
    args: SentenceTransformerTrainingArguments,
    settings: SliceArguments | None = None,
    model: SentenceTransformer | None = None,
    train_dataset: Any = None,
    callbacks: list[Any] | None = None,
    hub_api: Any = None,
) -> SentenceTransformerTrainer:
    """The ``SentenceTransformerTrainer`` of a run, not started. With ``args.push_to_hub`` the Hub is checked first
    (:func:`slice_st.training.hub.check_hub_access`).

    Args:
        args: The trainer's ``SentenceTransformerTrainingArguments``.
        settings: The run's :class:`SliceArguments` (``None``: all defaults).
        model: A ``SentenceTransformer`` (``None``: ``settings.model``).
        train_dataset: A dataset (or ``DatasetDict`` with ``slice``/``distill``) instead of ``settings``' data.
        callbacks: Extra ``transformers`` trainer callbacks.
        hub_api: Replaces ``huggingface_hub.HfApi()`` for the Hub check.

    Returns:
        A ``SentenceTransformerTrainer``, not started.
    """
    from sentence_transformers import SentenceTransformerTrainer

    with needs_extra("train", "slice-st train"):
        import datasets

    from slice_st.card import apply_model_card
    from slice_st.config import enable_span_features, set_span_config
    from slice_st.loading import load_model
    from slice_st.training.hub import check_hub_access

    settings = settings or SliceArguments()
    settings.check(args, needs_train_data=train_dataset is None)
    # before loading anything, not at the first save
    if args.push_to_hub and os.environ.get("RANK", "0") == "0":
        check_hub_access(args.hub_model_id, api=hub_api)
    # recipes start from the base
    model = model if model is not None else load_model(settings.model or "base")
    # every training batch carries offsets (the losses check, never change the model)
    enable_span_features(model)
    if settings.max_seq_length is not None:
        model.max_seq_length = settings.max_seq_length
    # Saved checkpoints search spans like the paper's evaluation (1..20 words); training uses max_span.
    set_span_config(
        model, min_span=settings.min_span, max_span=settings.eval_max_span, unit=settings.unit
    )
    objectives = settings.objectives if train_dataset is None else _given_objectives(train_dataset)
    losses = _losses(model, settings, objectives, args.seed)
    if settings.lora_r:  # after the distillation teacher was copied: it stays the plain base model
        _add_lora(model, settings.lora_r, settings.lora_alpha, settings.lora_layers)
    card = {**dataclasses.asdict(settings), "max_steps": args.max_steps}
    if train_dataset is None:
        parts = {"slice": load_training_data(settings, args.seed)} if "slice" in losses else {}
        if "distill" in losses:
            parts["distill"] = load_distillation_data(settings, args.seed, losses["distill"])
        train_dataset = parts[objectives[0]] if len(parts) == 1 else datasets.DatasetDict(parts)
    else:
        for name, key in (("slice", "train_data"), ("distill", "distill_data")):
            card[key] = card[key] or (["local"] if name in objectives else [])
    evaluator = _dev_evaluator(settings)
    order = list(train_dataset.keys()) if isinstance(train_dataset, dict) else list(objectives[:1])
    apply_model_card(
        model, card, repo_id=args.hub_model_id if args.push_to_hub else None, trainer_datasets=order
    )
    loss = losses[objectives[0]] if len(losses) == 1 else losses
    run = dict(train_dataset=train_dataset, evaluator=evaluator, callbacks=list(callbacks or []))
    return SentenceTransformerTrainer(
        model=model, args=_run_arguments(args, settings, evaluator), loss=loss, **run
    )


def _add_lora(model: SentenceTransformer, rank: int, alpha: float | None, layers: int = 0) -> None:
    """Attach a fresh LoRA adapter (every linear layer of the top ``layers`` layers, or of all) through
    sentence-transformers' ``add_adapter``; the layers below it then need no backward pass."""
    with needs_extra("train", "--lora-r (LoRA training)"):
        import peft
    targets: str | list[str] = "all-linear"
    if layers:
        transformer: Any = model[0].auto_model  # a Hugging Face model
        count = transformer.config.num_hidden_layers
        if layers > count:
            raise SpanInputError(f"lora_layers is {layers} but the model has {count} layers.")
        import torch

        top = tuple(f"layer.{index}." for index in range(count - layers, count))
        targets = [
            name
            for name, module in transformer.named_modules()
            if isinstance(module, torch.nn.Linear) and any(t in name for t in top)
        ]
    alpha = alpha if alpha is not None else 2 * rank
    config = peft.LoraConfig(r=rank, lora_alpha=alpha, lora_dropout=0.0, target_modules=targets)
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


def save_adapter(model: SentenceTransformer, path: str) -> str:
    """Write the model's LoRA adapter alone (``adapter_config.json`` + ``adapter_model.safetensors``) to ``path``."""
    transformer = next(
        module.auto_model for module in model if getattr(module, "auto_model", None) is not None
    )
    transformer.save_pretrained(path)
    config_path = Path(path, "adapter_config.json")
    adapter_config = json.loads(config_path.read_text(encoding="utf-8"))
    base = adapter_config.get("base_model_name_or_path") or ""
    if os.path.isabs(base):  # no local paths in what may be published
        from slice_st.card import hub_model_name

        name = hub_model_name(base) or os.path.basename(base.rstrip("/"))
        adapter_config["base_model_name_or_path"] = name
        config_path.write_text(json.dumps(adapter_config, indent=2, sort_keys=True), "utf-8")
    return path


def _given_objectives(dataset) -> tuple[str, ...]:
    """Objectives of a given dataset: a ``DatasetDict``'s keys, ``distill`` for a ``text`` column, else ``slice``."""
    if isinstance(dataset, dict):
        if unknown := set(dataset) - {"slice", "distill"}:
            raise ValueError(
                f"training DatasetDict keys must be 'slice' and/or 'distill', got {sorted(unknown)}."
            )
        return tuple(name for name in ("slice", "distill") if name in dataset)
    columns = [column for column in dataset.column_names if column != "label"]
    return ("distill",) if columns == ["text"] else ("slice",)


def sts_evaluator(path: str, name: str = "sts-dev"):
    """sentence-transformers' ``EmbeddingSimilarityEvaluator`` on an STS-B file (scores scaled to 0-1)."""
    from sentence_transformers.sentence_transformer.evaluation import EmbeddingSimilarityEvaluator

    from slice_st.data.stsb import read_stsb

    sts = read_stsb(path)
    scores = [score / 5 for score in sts["score"]]
    pairs = list(sts["sentence1"]), list(sts["sentence2"])
    return EmbeddingSimilarityEvaluator(*pairs, scores, name=name, write_csv=False)


def _dev_evaluator(settings: SliceArguments):
    evaluators = []
    if settings.dev is not None:
        from slice_st.data.stsb import read_stsb_context
        from slice_st.evaluation.span_retrieval import SpanRetrievalEvaluator

        dev = read_stsb_context(settings.dev)
        # every other row: files such as STS-B-Context are ordered by genre
        if settings.dev_select != "all":
            dev = dev.select(range(0 if settings.dev_select == "even" else 1, len(dev), 2))
        spans = {"min_span": settings.min_span, "max_span": settings.eval_max_span}
        dev = first_rows(dev, settings.dev_limit)
        evaluators.append(
            SpanRetrievalEvaluator.from_dataset(
                dev, setups=("single",), name="dev", unit=settings.unit, **spans
            )
        )
    if settings.sts_dev is not None:  # sentence-level similarity, to see that it is kept
        evaluators.append(sts_evaluator(settings.sts_dev))
    if len(evaluators) < 2:
        return evaluators[0] if evaluators else None
    from sentence_transformers.base.evaluation import SequentialEvaluator

    return SequentialEvaluator(evaluators, main_score_function=lambda scores: scores[0])


def check_train_output(output_dir: str, *, resume: bool = False, overwrite: bool = False) -> str:
    """``output_dir``, checked before any work: new or empty (or ``resume``, ``overwrite``), never a symbolic link, a
    file or an unwritable place (:class:`slice_st.errors.FileAccessError`)."""
    from slice_st.files import check_not_link, check_output

    # nothing is written, rotated or deleted through a link
    check_not_link(output_dir, purpose="for the run")
    full = "its checkpoints and final/ would be replaced; name a new folder, continue that run with --resume, or pass "
    return check_output(output_dir, full="" if resume or overwrite else full + "--overwrite.")


def train(
    args: SentenceTransformerTrainingArguments,
    settings: SliceArguments | None = None,
    model: SentenceTransformer | None = None,
    train_dataset: Any = None,
    callbacks: list[Any] | None = None,
    hub_api: Any = None,
) -> SentenceTransformer:
    """Train, save the final (best) model to ``args.output_dir/final`` and return the model.

    The output folder must be new or empty unless ``settings.resume`` or ``settings.overwrite``. With
    ``args.push_to_hub`` the Hub access is checked before anything else; the trainer pushes on its ``hub_strategy``
    and, at the end, the final model with its card.

    Args:
        args: The trainer's ``SentenceTransformerTrainingArguments``.
        settings: The run's :class:`SliceArguments`.
        model: A ``SentenceTransformer`` to train (``None``: ``settings.model``).
        train_dataset: A dataset (or ``DatasetDict`` with ``slice``/``distill``) instead of ``settings``' data.
        callbacks: Extra ``transformers`` trainer callbacks.
        hub_api: Replaces ``huggingface_hub.HfApi()`` for the Hub check (tests).

    Returns:
        The trained (best) model, also saved to ``output_dir/final``.

    Example:
        >>> args, settings = training_arguments(output_dir="runs/mine", distill_data=["notes.txt"])
        >>> train(args, settings)  # doctest: +SKIP
    """
    settings = settings or SliceArguments()
    # under accelerate the other ranks start as rank 0 writes
    if int(os.environ.get("RANK", "0")) == 0:
        check_train_output(args.output_dir, resume=settings.resume, overwrite=settings.overwrite)
    trainer = build_trainer(args, settings, model, train_dataset, callbacks, hub_api)
    checkpoint = last_complete_checkpoint(args.output_dir) if settings.resume else None
    if settings.resume and checkpoint is None:
        logger.warning(
            "--resume: no complete checkpoint in %s yet, starting from scratch.", args.output_dir
        )
    if checkpoint is not None:
        check_checkpoint_state(checkpoint)
    result, model = trainer.train(resume_from_checkpoint=checkpoint), trainer.model
    # One line per process, in one write so that the ranks' lines cannot interleave (synced ranks: one checksum).
    checksum = sum(float(parameter.detach().double().sum()) for parameter in model.parameters())
    sys.stderr.write(
        f"[rank {trainer.args.process_index}/{trainer.args.world_size}] trained to step {trainer.state.global_step}, "
        f"mean loss {result.training_loss:.4f}, parameter checksum {checksum:.6f}\n"
    )
    kept = {*TRAINING_DEFAULTS, "output_dir"}
    recipe = {key: value for key, value in args.to_dict().items() if key in kept}
    _save_final(trainer, model, {**recipe, **dataclasses.asdict(settings)})
    return model


def _save_final(trainer, model: SentenceTransformer, run_config: dict) -> None:
    """``final/`` (with the run's settings), pushed when asked; a LoRA run also keeps its adapter in ``adapter/``."""
    from slice_st.loading import has_adapters, merged_adapters, save_slice_model

    output_dir, main = trainer.args.output_dir, trainer.is_world_process_zero()
    final = os.path.join(output_dir, "final")
    # The trainer's push uploads output_dir except names starting with "_" and checkpoints: the new final/ is
    # written under "_final.new" (and an earlier run's final/ parked as "_final.old") until the push is done.
    staged, parked = os.path.join(output_dir, "_final.new"), os.path.join(output_dir, "_final.old")
    if main:
        for folder in (staged, parked):
            _remove_run_folder(folder)
        save_slice_model(model, staged)
        with open(os.path.join(staged, "slice_train_config.json"), "w", encoding="utf-8") as handle:
            json.dump(run_config, handle, indent=2, default=str)
    try:
        if trainer.args.push_to_hub:
            if main and os.path.isdir(final):
                os.replace(final, parked)
            # push the merged, flag-free model, not the trainer's adapter-only save
            if has_adapters(model):
                trainer.model = merged_adapters(model)
                for name in ("adapter_config.json", "adapter_model.safetensors") if main else ():
                    Path(output_dir, name).unlink(missing_ok=True)
            trainer.push_to_hub(commit_message="Final SLICE model")
    finally:
        if main:
            _remove_run_folder(final)
            os.replace(staged, final)
            _remove_run_folder(parked)
            # after the push: the adapter alone is a local by-product, not the pushed model
            if has_adapters(model):
                save_adapter(model, os.path.join(output_dir, "adapter"))


def _remove_run_folder(path: str) -> None:
    """Remove a folder of the run; a symbolic link there is removed as a link, never followed."""
    import shutil

    if os.path.islink(path) or os.path.isfile(path):
        os.unlink(path)
    else:
        shutil.rmtree(path, ignore_errors=True)


def check_checkpoint_state(checkpoint: str) -> None:
    """Read ``checkpoint``'s optimizer, scheduler, scaler and RNG states as the trainer will on resume (weights only:
    code in a pickle is refused, never run); a damaged file is a ``ValueError`` naming it, before training."""
    import glob
    from pickle import UnpicklingError

    import torch
    from transformers.trainer_pt_utils import safe_globals

    # what torch.load raises on a damaged or foreign file
    unreadable: tuple[type[Exception], ...] = (UnpicklingError, EOFError, RuntimeError, OSError)
    unreadable += (ValueError, AttributeError, TypeError, KeyError)
    names = ("optimizer.pt", "scheduler.pt", "scaler.pt")
    paths = [os.path.join(checkpoint, name) for name in names]
    # one per process
    paths += sorted(glob.glob(os.path.join(glob.escape(checkpoint), "rng_state*.pth")))
    for path in filter(os.path.exists, paths):
        try:
            with safe_globals():  # the numpy types of rng_state.pth, as the trainer allows
                torch.load(path, map_location="cpu", weights_only=True)
        except unreadable as error:
            why = " ".join(str(error).split())[:200] or type(error).__name__
            raise ValueError(
                f"--resume: {path} is damaged or not plain tensor data ({why}); nothing of it was run. Delete "
                f"{checkpoint} to resume from an earlier checkpoint, or train without --resume."
            ) from None


def last_complete_checkpoint(output_dir: str) -> str | None:
    """The newest checkpoint with its ``trainer_state.json`` (written last: a run killed mid-save has none)."""
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
