"""``SpanDistillationLoss``: label-free span self-distillation from the per-n-gram teacher (beyond the paper)."""

from __future__ import annotations

import copy
import logging
from collections.abc import Iterable, Mapping
from typing import Any

import torch
from torch import Tensor, nn

from slice_st.card import slice_card_data
from slice_st.config import enable_span_features, get_span_config
from slice_st.losses._common import SliceLoss, batch_units, check_offsets
from slice_st.spans import check_span_bounds, sample_spans, span_means
from slice_st.text import require

logger = logging.getLogger(__name__)

DISTILLATION_METRICS = ("cosine", "mse")

_TEACHER_KEYS = ("input_ids", "attention_mask", "token_type_ids")


class SpanDistillationLoss(SliceLoss):
    """Pull single-pass span means toward a frozen teacher's vectors of the same spans encoded alone.

    Encoding every n-gram on its own embeds spans best and slowest, so the base model's per-n-gram vector is a free
    teacher. For each text, ``spans_per_text`` spans are drawn (lengths stratified); the student's span vector is the
    mean of its token vectors (what :func:`slice_st.encode_spans` returns), the teacher's is
    ``teacher.encode(span_text)``. Each span costs ``1 - cos`` (or the MSE); ``text_weight`` adds the same term on
    the whole-text embeddings, so sentence similarity is kept. Returns ``{"span": ..., "text": ...}``, which the
    trainer sums and logs. The teacher never trains; when it shares the student's WordPiece vocabulary, its span
    inputs are cut from the batch's token ids. :meth:`cache_teacher_vectors` precomputes its vectors once.

    Args:
        model: The student ``SentenceTransformer`` (span features are switched on).
        teacher: A ``SentenceTransformer`` or model name (``None``: a frozen copy of ``model`` taken now).
        spans_per_text: Spans drawn per text.
        min_span: Shortest span, in units.
        max_span: Longest span, in units.
        unit: ``"word"`` or ``"token"`` (``None``: the model's span setting).
        metric: ``"cosine"`` (1 − cos) or ``"mse"`` (on the raw vectors).
        text_weight: Weight of the whole-text term.
        weight: Scales the whole loss (to mix it with other losses in one run).
        teacher_batch_size: Batch size of the teacher when span strings are encoded.
        seed: Seed of the span sampler.

    References:
        - Orbach et al. (2024), *Span-Aggregatable, Contextualized Word Embeddings for Effective Phrase Mining*:
          https://arxiv.org/abs/2405.07263
        - Hinton et al. (2015), *Distilling the Knowledge in a Neural Network*: https://arxiv.org/abs/1503.02531

    Requirements:
        1. Unlabeled texts only.

    Inputs:
        +--------+------------------------------------------------------+
        | Texts  | Labels                                               |
        +========+======================================================+
        | (text) | none, or the cached vectors of cache_teacher_vectors |
        +--------+------------------------------------------------------+

    Example:
        >>> import torch
        >>> from slice_st import SpanDistillationLoss, load_model
        >>> model = load_model()
        >>> loss = SpanDistillationLoss(model, spans_per_text=4, max_span=5)
        >>> features = [model.preprocess(["A man is playing the guitar on stage tonight."])]
        >>> with torch.no_grad():
        ...     parts = loss(features)      # before training: whole texts agree, spans do not yet
        >>> sorted(parts), abs(round(parts["text"].item(), 4)), parts["span"].item() > 0.05
        (['span', 'text'], 0.0, True)
    """

    config_keys = ("spans_per_text", "min_span", "max_span", "unit", "metric", "text_weight", "weight")

    def __init__(
        self,
        model,
        teacher=None,
        spans_per_text: int = 8,
        min_span: int = 1,
        max_span: int = 12,
        unit: str | None = None,
        metric: str = "cosine",
        text_weight: float = 1.0,
        weight: float = 1.0,
        teacher_batch_size: int = 512,
        seed: int | None = None,
    ) -> None:
        super().__init__()
        check_span_bounds(min_span, max_span)
        if spans_per_text < 1:
            raise ValueError(f"spans_per_text must be >= 1, got {spans_per_text}.")
        if metric not in DISTILLATION_METRICS:
            raise ValueError(f"metric must be one of {DISTILLATION_METRICS}, got {metric!r}.")
        if text_weight < 0 or weight < 0:
            raise ValueError(f"text_weight and weight must be >= 0, got {text_weight} and {weight}.")
        self.model = model
        self.spans_per_text, self.min_span, self.max_span = spans_per_text, min_span, max_span
        self.unit = get_span_config(model).replace(unit=unit).unit
        self.metric, self.text_weight, self.weight = metric, text_weight, weight
        self.teacher_batch_size = teacher_batch_size
        self.seed = seed
        self.generator = torch.Generator()
        if seed is not None:
            self.generator.manual_seed(seed)
        self.teacher, self.teacher_name = frozen_teacher(model, teacher)
        self.skipped_spans = 0
        enable_span_features(model)
        self._ids_path = shares_wordpiece_tokenizer(model, self.teacher)
        slice_card_data(model, self)  # fit() / the Trainer write a SLICE card

    def train(self, mode: bool = True) -> SpanDistillationLoss:
        super().train(mode)
        self.teacher.eval()  # the teacher never trains (no dropout)
        return self

    def forward(
        self, sentence_features: Iterable[dict[str, Tensor]], labels: Tensor | None = None
    ) -> dict[str, Tensor]:
        features = text_column(sentence_features, self.unit, type(self).__name__)
        output = self.model(features)
        units = batch_units(features, self.unit)
        token_embeddings = output["token_embeddings"]
        # Cached teacher vectors; 1-D labels (model.fit's dummy 0s) are ignored.
        if labels is not None and labels.dim() >= 2:
            labels = labels.to(token_embeddings.device)
            starts, ends, span_targets, text_targets = self._from_labels(labels, units.num_units)
        else:
            spans = (self.spans_per_text, self.min_span, self.max_span, self.generator)
            starts, ends = sample_spans(units.num_units, *spans)
            with torch.no_grad():
                span_targets, text_targets = self._teacher_vectors(features, units.boundaries, starts, ends)
        student_spans, valid = span_means(token_embeddings, units.boundaries, starts, ends)
        has_text = units.num_units > 0
        span_loss = vector_distance(student_spans[valid], span_targets[valid], self.metric)
        text_loss = vector_distance(output["sentence_embedding"][has_text], text_targets[has_text], self.metric)
        if not bool(valid.any()):
            self.skipped_spans += int(valid.numel())
            span_loss = token_embeddings.sum() * 0.0
        if not bool(has_text.any()):
            text_loss = token_embeddings.sum() * 0.0
        parts = {"span": self.weight * span_loss, "text": self.weight * self.text_weight * text_loss}
        if any(torch.isnan(value) for value in parts.values()):
            raise FloatingPointError("SpanDistillationLoss is NaN: check the inputs and the learning rate.")
        return parts

    def _from_labels(self, labels: Tensor, num_units: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """Spans and teacher vectors from cached labels; spans past this batch's units are dropped (counted)."""
        dim = self.model.get_embedding_dimension()
        if labels.dim() != 3 or labels.shape[-1] != dim + 2 or labels.shape[1] < 2:
            raise ValueError(
                f"cached labels have shape {tuple(labels.shape)}; expected (B, 1 + spans, 2 + {dim}) from "
                f"cache_teacher_vectors()."
            )
        starts = labels[:, 1:, 0].round().long()
        ends = labels[:, 1:, 1].round().long()
        fits = (starts >= 0) & (ends <= num_units[:, None]) & (ends > starts)
        dropped = int(((starts >= 0) & ~fits).sum())
        if dropped:
            self.skipped_spans += dropped
            past = "lie past the tokenized text (max_seq_length changed?); skipped"
            logger.warning("SpanDistillationLoss: %d cached span(s) %s.", dropped, past)
        starts, ends = starts.masked_fill(~fits, -1), ends.masked_fill(~fits, -1)
        return starts, ends, labels[:, 1:, 2:], labels[:, 0, 2:]

    def _teacher_vectors(self, features: dict[str, Any], boundaries, starts, ends) -> tuple[Tensor, Tensor]:
        """Teacher vectors ``(B, n, d)`` of the spans (zeros where missing) and ``(B, d)`` of the whole texts."""
        teacher = self.teacher
        device = features["input_ids"].device
        if next(teacher.parameters()).device != device:
            teacher.to(device)
        valid = starts >= 0
        batch, count = starts.shape
        dim = teacher.get_embedding_dimension()
        span_vectors = torch.zeros(batch, count, dim, device=device)
        if self._ids_path:
            whole = {key: features[key] for key in _TEACHER_KEYS if key in features}
            text_vectors = self._teacher_forward(whole)
            if bool(valid.any()):
                span_inputs = span_token_inputs(self.model.tokenizer, features, boundaries, starts, ends, valid)
                span_vectors[valid] = self._teacher_batched(span_inputs)
            return span_vectors, text_vectors
        # Another tokenizer: the texts and spans decoded with the student's (no raw text inside a training step).
        texts = self.model.tokenizer.batch_decode(features["input_ids"], skip_special_tokens=True)
        span_strings = self._decoded_spans(features, boundaries, starts, ends, valid)
        text_vectors = self._teacher_encode(texts, device)
        if span_strings:
            span_vectors[valid] = self._teacher_encode(span_strings, device)
        return span_vectors, text_vectors

    def _decoded_spans(self, features, boundaries, starts, ends, valid) -> list[str]:
        token_lo = boundaries.gather(1, starts.clamp(min=0))
        token_hi = boundaries.gather(1, ends.clamp(min=0))
        ids = features["input_ids"].tolist()
        rows = torch.nonzero(valid, as_tuple=True)[0].tolist()
        pieces = [ids[row][lo:hi] for row, lo, hi in zip(rows, token_lo[valid].tolist(), token_hi[valid].tolist())]
        return self.model.tokenizer.batch_decode(pieces, skip_special_tokens=True)

    def _teacher_forward(self, inputs: dict[str, Tensor]) -> Tensor:
        return self.teacher(dict(inputs))["sentence_embedding"].float()

    def _teacher_batched(self, inputs: dict[str, Tensor]) -> Tensor:
        """Teacher vectors of many short rows: sorted by length, so each chunk carries little padding."""
        size = self.teacher_batch_size
        lengths = inputs["attention_mask"].sum(dim=1)
        order = torch.argsort(lengths)
        vectors = None
        for lo in range(0, len(order), size):
            rows = order[lo : lo + size]
            keep = int(lengths[rows].max())  # trim this chunk's padding columns
            chunk = self._teacher_forward({key: value[rows, :keep] for key, value in inputs.items()})
            if vectors is None:
                vectors = chunk.new_empty(len(order), chunk.shape[1])
            vectors[rows] = chunk
        return vectors

    def _teacher_encode(self, strings: list[str], device) -> Tensor:
        options = {"batch_size": self.teacher_batch_size, "convert_to_tensor": True, "show_progress_bar": False}
        return self.teacher.encode(strings, **options).to(device).float()

    def cache_teacher_vectors(
        self, dataset, column: str = "text", batch_size: int = 64, seed: int = 0, show_progress_bar: bool | None = None
    ):
        """Precompute spans and teacher vectors for a text dataset → the dataset with a ``label`` column.

        Each row's label is a ``(1 + spans_per_text, 2 + d)`` float32 array: row 0 holds the teacher's whole-text
        vector, the others ``start, end`` (units) and the teacher's vector of that span (``-1, -1`` and zeros where
        a text is too short). Training on it gives exactly the on-the-fly loss for the same spans, without running
        the teacher; the spans are drawn once (seeded), so every epoch sees the same ones.
        """
        from tqdm.auto import tqdm

        datasets = require("datasets", "train", "caching teacher vectors")

        if column not in dataset.column_names:
            raise ValueError(f"dataset has no column {column!r}; columns: {dataset.column_names}.")
        texts = dataset[column]
        generator = torch.Generator().manual_seed(seed)
        batches = range(0, len(texts), batch_size)
        hidden = show_progress_bar is False or (show_progress_bar is None and len(batches) < 20)
        blocks = [
            self._label_block(texts[lo : lo + batch_size], generator)
            for lo in tqdm(batches, desc="teacher vectors", disable=hidden)
        ]
        dim = self.model.get_embedding_dimension()
        label_array = torch.cat(blocks).numpy() if blocks else torch.zeros(0, 1 + self.spans_per_text, 2 + dim).numpy()
        features = datasets.Features(
            {column: datasets.Value("string"), "label": datasets.Array2D(shape=label_array.shape[1:], dtype="float32")}
        )
        return datasets.Dataset.from_dict({column: list(texts), "label": label_array}, features=features)

    def _label_block(self, chunk: list[str], generator: torch.Generator) -> Tensor:
        """The cached labels of a chunk of texts: drawn spans and the teacher's vectors."""
        device = next(self.model.parameters()).device
        features = self.model.preprocess(chunk)
        features = {key: value.to(device) if isinstance(value, Tensor) else value for key, value in features.items()}
        units = batch_units(features, self.unit)
        starts, ends = sample_spans(units.num_units, self.spans_per_text, self.min_span, self.max_span, generator)
        with torch.no_grad():  # exactly what a training step computes for the same spans
            span_vectors, text_vectors = self._teacher_vectors(features, units.boundaries, starts, ends)
        block = torch.zeros(len(chunk), 1 + self.spans_per_text, 2 + self.model.get_embedding_dimension())
        block[:, 0, 1] = units.num_units.float().cpu()
        block[:, 0, 2:] = text_vectors.cpu()
        block[:, 1:, 0] = starts.float().cpu()
        block[:, 1:, 1] = ends.float().cpu()
        block[:, 1:, 2:] = span_vectors.cpu()
        return block

    def get_config_dict(self) -> dict[str, Any]:
        return {"teacher": self.teacher_name, **super().get_config_dict()}


def vector_distance(student: Tensor, teacher: Tensor, metric: str = "cosine") -> Tensor:
    """Mean distance between rows of student and teacher vectors: ``1 − cosine`` or MSE (``DISTILLATION_METRICS``).

    >>> import torch
    >>> float(vector_distance(torch.tensor([[1.0, 0.0]]), torch.tensor([[0.0, 2.0]])))
    1.0
    """
    teacher = teacher.to(student.dtype)
    if metric == "cosine":
        return (1 - nn.functional.cosine_similarity(student, teacher, dim=-1)).mean()
    return nn.functional.mse_loss(student, teacher)


def frozen_teacher(model, teacher=None) -> tuple[Any, str]:
    """``(teacher, display name)``: a frozen copy of ``model`` taken now (``None``), a model name, or a model; never
    trains."""
    from slice_st.loading import load_model, model_identity

    name = f"frozen copy of {model_identity(model)[0]}" if teacher is None else teacher
    if teacher is None:
        teacher = copy.deepcopy(model)
    elif isinstance(teacher, str):
        teacher = load_model(teacher)
    else:
        name = model_identity(teacher)[0]
    teacher.requires_grad_(False)
    teacher.eval()
    return teacher, name


def text_column(sentence_features, unit: str, loss_name: str) -> dict[str, Tensor]:
    """The single text column of a distillation batch, checked (word units need the tokenizer's offsets)."""
    columns = [sentence_features] if isinstance(sentence_features, Mapping) else list(sentence_features)
    if len(columns) != 1:
        raise ValueError(f"{loss_name} takes one text column, got {len(columns)}.")
    check_offsets(columns, unit)
    return columns[0]


def span_token_inputs(
    tokenizer, features, boundaries: Tensor, starts: Tensor, ends: Tensor, valid: Tensor
) -> dict[str, Tensor]:
    """``[CLS] span tokens [SEP]`` rows cut from a batch's token ids for the ``valid`` spans (vectorised, no loop over
    spans).

    The rows are exactly what the tokenizer gives for the span text alone when words tokenize alone as in
    context (WordPiece): the per-n-gram input of a span, without re-tokenizing.
    """
    rows = torch.arange(starts.shape[0], device=starts.device)[:, None].expand_as(starts)[valid]
    token_lo = boundaries.gather(1, starts.clamp(min=0))[valid]
    token_hi = boundaries.gather(1, ends.clamp(min=0))[valid]
    lengths = token_hi - token_lo
    width = int(lengths.max())
    positions = torch.arange(width, device=starts.device)[None, :]
    take = (token_lo[:, None] + positions).clamp(max=features["input_ids"].shape[1] - 1)
    inside = positions < lengths[:, None]
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    body = torch.where(inside, features["input_ids"][rows[:, None], take], torch.full_like(take, pad))
    input_ids = torch.full((len(rows), width + 2), pad, dtype=body.dtype, device=body.device)
    input_ids[:, 0] = tokenizer.cls_token_id
    input_ids[:, 1 : width + 1] = body
    input_ids[torch.arange(len(rows), device=body.device), lengths + 1] = tokenizer.sep_token_id
    attention_mask = (torch.arange(width + 2, device=body.device)[None, :] < (lengths + 2)[:, None]).long()
    inputs = {"input_ids": input_ids, "attention_mask": attention_mask}
    if "token_type_ids" in features:
        inputs["token_type_ids"] = torch.zeros_like(input_ids)
    return inputs


def shares_wordpiece_tokenizer(student, teacher) -> bool:
    """True when span token ids can go to the teacher as they are (same WordPiece vocab: words tokenize alone as in
    context)."""
    a, b = getattr(student, "tokenizer", None), getattr(teacher, "tokenizer", None)
    if a is None or b is None or type(a) is not type(b):
        return False
    backend = getattr(a, "backend_tokenizer", None)
    if (
        backend is None
        or type(backend.model).__name__ != "WordPiece"
        or a.cls_token_id is None
        or a.sep_token_id is None
    ):
        return False
    same_normaliser = getattr(a, "do_lower_case", None) == getattr(b, "do_lower_case", None)
    return same_normaliser and a.get_vocab() == b.get_vocab()
