"""``SpanDistillationLoss``: label-free span self-distillation from the per-n-gram teacher (beyond the paper)."""

from __future__ import annotations

import copy
import logging
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

import torch
from sentence_transformers.util import batch_to_device
from torch import Tensor, nn

from slice_st._extras import needs_extra
from slice_st.config import get_span_config
from slice_st.losses._common import SliceLoss, batch_units, check_offsets, require_span_features
from slice_st.spans import check_span_bounds, sample_spans, span_means

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

logger = logging.getLogger(__name__)

DISTILLATION_METRICS = ("cosine", "mse")
_TEACHER_KEYS = ("input_ids", "attention_mask", "token_type_ids")


class SpanDistillationLoss(SliceLoss):
    """Pull single-pass span means toward a frozen teacher's vectors of the same spans encoded alone.

    Encoding each n-gram alone embeds spans best and slowest, so the base model's per-n-gram vector is a free teacher.
    Per text, ``spans_per_text`` spans are drawn (lengths stratified); each costs ``1 - cos`` (or the MSE) between its
    mean token vector (what :func:`slice_st.encode_spans` returns) and ``teacher.encode(span_text)``; ``text_weight``
    adds the same on whole texts, so sentence similarity is kept. Returns ``{"span": ..., "text": ...}`` (the trainer
    sums and logs them). The teacher never trains; with the student's WordPiece vocabulary its span inputs are cut
    from the batch's token ids. :meth:`cache_teacher_vectors` precomputes its vectors once.

    Args:
        model: The student ``SentenceTransformer``, with span features (:func:`slice_st.config.enable_span_features`).
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
        >>> from slice_st.config import enable_span_features
        >>> model = enable_span_features(load_model())
        >>> loss = SpanDistillationLoss(model, spans_per_text=4, max_span=5)
        >>> features = [model.preprocess(["A man is playing the guitar on stage tonight."])]
        >>> with torch.no_grad():
        ...     parts = loss(features)      # before training: whole texts agree, spans do not yet
        >>> sorted(parts), abs(round(parts["text"].item(), 4)), parts["span"].item() > 0.05
        (['span', 'text'], 0.0, True)
    """

    config_keys = (
        "spans_per_text",
        "min_span",
        "max_span",
        "unit",
        "metric",
        "text_weight",
        "weight",
    )

    def __init__(
        self,
        model: SentenceTransformer,
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
            raise ValueError(
                f"text_weight and weight must be >= 0, got {text_weight} and {weight}."
            )
        require_span_features(model, type(self).__name__)
        self.model, self.teacher_batch_size, self.skipped_spans = model, teacher_batch_size, 0
        self.spans_per_text, self.min_span, self.max_span = spans_per_text, min_span, max_span
        self.unit = get_span_config(model).replace(unit=unit).unit
        self.metric, self.text_weight, self.weight = metric, text_weight, weight
        self.generator = torch.Generator() if seed is None else torch.Generator().manual_seed(seed)
        self.teacher, self.teacher_name = frozen_teacher(model, teacher)
        self._ids_path = shares_wordpiece_tokenizer(model, self.teacher)

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
            span_targets, text_targets = self._teacher_vectors(
                features, units.boundaries, starts, ends
            )
        student_spans, valid = span_means(token_embeddings, units.boundaries, starts, ends)
        has_text = units.num_units > 0
        span_loss = vector_distance(student_spans[valid], span_targets[valid], self.metric)
        text_loss = vector_distance(
            output["sentence_embedding"][has_text], text_targets[has_text], self.metric
        )
        if not bool(valid.any()):
            self.skipped_spans += int(valid.numel())
            span_loss = token_embeddings.sum() * 0.0
        if not bool(has_text.any()):
            text_loss = token_embeddings.sum() * 0.0
        parts = {
            "span": self.weight * span_loss,
            "text": self.weight * self.text_weight * text_loss,
        }
        if any(torch.isnan(value) for value in parts.values()):
            raise FloatingPointError(
                "SpanDistillationLoss is NaN: check the inputs and the learning rate."
            )
        return parts

    def _from_labels(
        self, labels: Tensor, num_units: Tensor
    ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """Spans and teacher vectors from cached labels; spans past this batch's units are dropped (counted)."""
        dim = self.model.get_embedding_dimension()
        if labels.dim() != 3 or labels.shape[-1] != dim + 2 or labels.shape[1] < 2:
            raise ValueError(
                f"cached labels of shape {tuple(labels.shape)}, not (B, 1 + spans, 2 + {dim})."
            )
        starts, ends = labels[:, 1:, :2].round().long().unbind(-1)
        fits = (starts >= 0) & (ends <= num_units[:, None]) & (ends > starts)
        if dropped := int(((starts >= 0) & ~fits).sum()):
            self.skipped_spans += dropped
            logger.warning(
                "SpanDistillationLoss: %d cached span(s) past the tokenized text skipped.", dropped
            )
        starts, ends = starts.masked_fill(~fits, -1), ends.masked_fill(~fits, -1)
        return starts, ends, labels[:, 1:, 2:], labels[:, 0, 2:]

    @torch.no_grad()
    def _teacher_vectors(
        self, features: dict[str, Any], boundaries, starts, ends
    ) -> tuple[Tensor, Tensor]:
        """Teacher vectors ``(B, n, d)`` of the spans (zeros where missing) and ``(B, d)`` of the whole texts."""
        ids, valid = features["input_ids"], starts >= 0
        if next(self.teacher.parameters()).device != ids.device:
            self.teacher.to(ids.device)
        span_vectors = torch.zeros(
            *starts.shape, self.teacher.get_embedding_dimension(), device=ids.device
        )
        if self._ids_path:
            text_vectors = self._teacher_rows(
                {key: features[key] for key in _TEACHER_KEYS if key in features}
            )
            if bool(valid.any()):
                span_inputs = span_token_inputs(
                    self.model.tokenizer, features, boundaries, starts, ends, valid
                )
                span_vectors[valid] = self._teacher_rows(span_inputs)
            return span_vectors, text_vectors
        # Another tokenizer: the texts and spans decoded with the student's (no raw text inside a training step).
        token_lo, token_hi = (
            boundaries.gather(1, index.clamp(min=0))[valid].tolist() for index in (starts, ends)
        )
        rows, token_ids = torch.nonzero(valid, as_tuple=True)[0].tolist(), ids.tolist()
        pieces = [token_ids[row][lo:hi] for row, lo, hi in zip(rows, token_lo, token_hi)]
        text_vectors = self._teacher_encode(token_ids)
        if pieces:
            span_vectors[valid] = self._teacher_encode(pieces)
        return span_vectors, text_vectors

    def _teacher_rows(self, inputs: dict[str, Tensor]) -> Tensor:
        """Teacher vectors of token rows, in chunks of rows sorted by length (little padding in each)."""
        lengths = inputs["attention_mask"].sum(dim=1)
        order = torch.argsort(lengths)
        chunks = []
        for rows in order.split(self.teacher_batch_size):
            keep = int(lengths[rows].max())  # trim this chunk's padding columns
            chunk = self.teacher({key: value[rows, :keep] for key, value in inputs.items()})
            chunks.append(chunk["sentence_embedding"].float())
        return torch.cat(chunks)[torch.argsort(order)]

    def _teacher_encode(self, token_ids) -> Tensor:
        """Teacher vectors of token id rows decoded to text with the student's tokenizer."""
        texts = self.model.tokenizer.batch_decode(token_ids, skip_special_tokens=True)
        options = {"batch_size": self.teacher_batch_size, "show_progress_bar": False}
        return self.teacher.encode(texts, convert_to_tensor=True, **options).float()

    def cache_teacher_vectors(
        self,
        dataset,
        column: str = "text",
        batch_size: int = 64,
        seed: int = 0,
        show_progress_bar: bool | None = None,
    ):
        """Precompute spans and teacher vectors for a text dataset → the dataset with a ``label`` column.

        Each row's label is a ``(1 + spans_per_text, 2 + d)`` float32 array: row 0 holds the teacher's whole-text
        vector, the others ``start, end`` (units) and the teacher's vector of that span (``-1, -1`` and zeros where
        a text is too short). Training on it gives exactly the on-the-fly loss for the same spans, without running
        the teacher; the spans are drawn once (seeded), so every epoch sees the same ones.
        """
        from tqdm.auto import tqdm

        with needs_extra("train", "caching teacher vectors"):
            import datasets

        if column not in dataset.column_names:
            raise ValueError(f"dataset has no column {column!r}; columns: {dataset.column_names}.")
        texts = dataset[column]
        generator = torch.Generator().manual_seed(seed)
        batches = range(0, len(texts), batch_size)
        hidden = show_progress_bar is False or (show_progress_bar is None and len(batches) < 20)
        blocks = [torch.zeros(0, 1 + self.spans_per_text, 2 + self.model.get_embedding_dimension())]
        for lo in tqdm(batches, desc="teacher vectors", disable=hidden):
            features = batch_to_device(
                self.model.preprocess(texts[lo : lo + batch_size]), self.model.device
            )
            units = batch_units(features, self.unit)
            starts, ends = sample_spans(
                units.num_units, self.spans_per_text, self.min_span, self.max_span, generator
            )
            # exactly what a training step computes for the same spans
            span_vectors, text_vectors = self._teacher_vectors(
                features, units.boundaries, starts, ends
            )
            spans = torch.cat([torch.stack([starts, ends], dim=-1).float(), span_vectors], dim=-1)
            text = torch.cat([torch.zeros_like(text_vectors[:, :2]), text_vectors], dim=-1)[:, None]
            blocks.append(torch.cat([text, spans], dim=1).cpu())
        label_array = torch.cat(blocks).numpy()
        label = datasets.Array2D(shape=label_array.shape[1:], dtype="float32")
        features = datasets.Features({column: datasets.Value("string"), "label": label})
        rows = {column: list(texts), "label": label_array}
        return datasets.Dataset.from_dict(rows, features=features)

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


def frozen_teacher(model: SentenceTransformer, teacher=None) -> tuple[Any, str]:
    """``(teacher, display name)``, frozen: a copy of ``model`` taken now (``None``), a model name, or a model."""
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
    columns = (
        [sentence_features] if isinstance(sentence_features, Mapping) else list(sentence_features)
    )
    if len(columns) != 1:
        raise ValueError(f"{loss_name} takes one text column, got {len(columns)}.")
    check_offsets(columns, unit)
    return columns[0]


def span_token_inputs(
    tokenizer, features, boundaries: Tensor, starts: Tensor, ends: Tensor, valid: Tensor
) -> dict[str, Tensor]:
    """``[CLS] span tokens [SEP]`` rows cut from a batch's token ids for the ``valid`` spans (vectorised): what a
    WordPiece tokenizer gives for the span text alone (words tokenize alone as in context), without re-tokenizing."""
    ids = features["input_ids"]
    rows = torch.nonzero(valid, as_tuple=True)[0]
    token_lo, token_hi = (
        boundaries.gather(1, index.clamp(min=0))[valid][:, None] for index in (starts, ends)
    )
    lengths = token_hi - token_lo
    # -1: [CLS]; a length: [SEP]
    positions = torch.arange(int(lengths.max()) + 2, device=ids.device)[None, :] - 1
    body = ids[rows[:, None], (token_lo + positions).clamp(0, ids.shape[1] - 1)]
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    input_ids = torch.where(positions < lengths, body, pad)
    input_ids = torch.where(positions == lengths, tokenizer.sep_token_id, input_ids)
    input_ids[:, 0] = tokenizer.cls_token_id
    inputs = {"input_ids": input_ids, "attention_mask": (positions <= lengths).long()}
    if "token_type_ids" in features:
        inputs["token_type_ids"] = torch.zeros_like(input_ids)
    return inputs


def shares_wordpiece_tokenizer(student, teacher) -> bool:
    """True when span token ids can go to the teacher as they are (the same WordPiece vocabulary and casing)."""
    a, b = getattr(student, "tokenizer", None), getattr(teacher, "tokenizer", None)
    backend = getattr(a, "backend_tokenizer", None)
    return (
        b is not None
        and type(a) is type(b)
        and type(getattr(backend, "model", None)).__name__ == "WordPiece"
        and None not in (a.cls_token_id, a.sep_token_id)
        and getattr(a, "do_lower_case", None) == getattr(b, "do_lower_case", None)
        and a.get_vocab() == b.get_vocab()
    )
