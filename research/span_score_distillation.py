"""``SpanScoreDistillationLoss``: distil a teacher's span *similarities* (any embedding size) into single-pass spans.

Status: experimental — best selection score of all runs (75.36 single pass at step 300) but STS-B dev fell 2.5 points
(84.23 against 86.7), so it is not shipped; kept to study a teacher of another size.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

import torch
from torch import Tensor, nn

from research.span_lab import shift_spans
from slice_st.card import SLICE_CITATION, slice_card_data
from slice_st.config import enable_span_features, get_span_config
from slice_st.losses.span_distillation import (
    frozen_teacher,
    shares_wordpiece_tokenizer,
    span_token_inputs,
    text_column,
)
from slice_st.spans import check_span_bounds, sample_spans, span_means
from slice_st.tokens import unit_boundaries

__all__ = ["SpanScoreDistillationLoss"]

logger = logging.getLogger(__name__)


class SpanScoreDistillationLoss(nn.Module):
    """Match the teacher's phrase-to-span similarities with the student's single-pass ones.

    For each text of the batch, ``spans_per_text`` spans are drawn (lengths stratified over
    ``min_span..max_span`` units); a fraction ``shifted_fraction`` of them are copies of the others
    moved by up to ``max_shift`` units at each end (hard negatives: overlapping and shifted spans).
    Every drawn span is also an origin phrase: the student encodes it *alone*, exactly as
    :func:`slice_st.encode.embed_texts` encodes queries (mean of its non-special token vectors), and scores
    it against every drawn span's single-pass vector of the batch (``S = q · cᵀ``, cosines). The
    teacher encodes the span strings alone (``teacher.encode``: any model, any dimension) and gives
    the target cosines ``T``. The loss is a listwise KL per phrase over all candidate spans
    (``softmax(T / τ) ‖ softmax(S / τ)``: the max-over-spans decision the benchmark scores) times
    ``listwise_weight``, plus ``cosine_weight`` · MSE(S, T) so absolute scores, and thresholds, follow
    the teacher.

    Status: experimental (see :mod:`research.span_score_distillation`).

    Args:
        model: The ``SentenceTransformer`` to train (span features are switched on).
        teacher: A ``SentenceTransformer``, a model name or path, or ``None`` for a frozen copy of ``model``.
        spans_per_text: Spans drawn per text (at least 2: a list to rank).
        min_span: Shortest span, in units (words or tokens, the model's span setting).
        max_span: Longest span, in units.
        shifted_fraction: Fraction of the drawn spans that are shifted copies of the others (0 ≤ f < 1).
        max_shift: Largest shift of a copy's ends, in units.
        temperature: Softmax temperature τ of the listwise term.
        listwise_weight: Weight of the listwise KL term.
        cosine_weight: Weight of the MSE term on the cosines.
        weight: Scales the whole loss (to mix it with other losses in one run).
        teacher_batch_size: Batch size of ``teacher.encode`` when span strings are decoded.
        seed: Seed of the span sampler.

    References:
        - Orbach et al. (2024), *Span-Aggregatable, Contextualized Word Embeddings for Effective Phrase Mining*:
          https://arxiv.org/abs/2405.07263

    Inputs:
        +-------------------+--------+
        | Texts             | Labels |
        +===================+========+
        | (text)            | none   |
        +-------------------+--------+

    Example:
        >>> import torch
        >>> from slice_st import load_model
        >>> from research.span_score_distillation import SpanScoreDistillationLoss
        >>> model = load_model("base")          # teacher: a frozen copy (or any model, e.g. all-mpnet-base-v2)
        >>> loss = SpanScoreDistillationLoss(model, spans_per_text=4, max_span=4, seed=0)
        >>> with torch.no_grad():
        ...     parts = loss([model.preprocess(["A man is playing the guitar on stage tonight."])])
        >>> sorted(parts), bool(parts["listwise"] >= 0)
        (['cosine', 'listwise'], True)
    """

    def __init__(
        self,
        model,
        teacher=None,
        spans_per_text: int = 8,
        min_span: int = 1,
        max_span: int = 12,
        shifted_fraction: float = 0.5,
        max_shift: int = 2,
        temperature: float = 0.05,
        listwise_weight: float = 1.0,
        cosine_weight: float = 1.0,
        weight: float = 1.0,
        teacher_batch_size: int = 256,
        seed: int | None = None,
    ) -> None:
        super().__init__()
        check_span_bounds(min_span, max_span)
        if spans_per_text < 2:
            raise ValueError(f"spans_per_text must be >= 2 (a list to rank), got {spans_per_text}.")
        if not 0 <= shifted_fraction < 1:
            raise ValueError(f"shifted_fraction must be in [0, 1), got {shifted_fraction}.")
        if temperature <= 0:
            raise ValueError(f"temperature must be > 0, got {temperature}.")
        if min(listwise_weight, cosine_weight, weight) < 0:
            raise ValueError("weights must be >= 0.")
        self.model = model
        self.spans_per_text, self.min_span, self.max_span = spans_per_text, min_span, max_span
        self.shifted_fraction, self.max_shift = shifted_fraction, max_shift
        self.temperature, self.listwise_weight, self.cosine_weight, self.weight = (
            temperature,
            listwise_weight,
            cosine_weight,
            weight,
        )
        self.unit = get_span_config(model).unit
        self.teacher_batch_size = teacher_batch_size
        self.generator = torch.Generator()
        if seed is not None:
            self.generator.manual_seed(seed)
        self.teacher, self.teacher_name = frozen_teacher(model, teacher)
        enable_span_features(model)
        self._ids_path = shares_wordpiece_tokenizer(model, self.teacher)
        self.skipped_spans = 0
        slice_card_data(model, self)  # fit() / the Trainer write a SLICE card

    def train(self, mode: bool = True) -> SpanScoreDistillationLoss:
        super().train(mode)
        self.teacher.eval()
        return self

    def forward(
        self, sentence_features: Iterable[dict[str, Tensor]], labels: Tensor | None = None
    ) -> dict[str, Tensor]:
        features = text_column(sentence_features, self.unit, type(self).__name__)
        output = self.model(features)
        token_embeddings = output["token_embeddings"]
        units = unit_boundaries(
            features["attention_mask"],
            features.get("special_tokens_mask"),
            features.get("offset_mapping"),
            self.unit,
        )
        shifted = int(round(self.spans_per_text * self.shifted_fraction))
        starts, ends = sample_spans(
            units.num_units,
            self.spans_per_text - shifted,
            self.min_span,
            self.max_span,
            self.generator,
        )
        if shifted:
            more = shift_spans(
                starts,
                ends,
                units.num_units,
                shifted,
                self.max_shift,
                self.min_span,
                self.generator,
            )
            starts, ends = torch.cat([starts, more[0]], dim=1), torch.cat([ends, more[1]], dim=1)
        in_context, valid = span_means(token_embeddings, units.boundaries, starts, ends)
        if int(valid.sum()) < 2:
            self.skipped_spans += int((~valid).sum())
            zero = token_embeddings.sum() * 0.0
            return {"listwise": zero, "cosine": zero}
        span_inputs = span_token_inputs(
            self.model.tokenizer, features, units.boundaries, starts, ends, valid
        )
        phrases = self._alone_means(span_inputs)  # the student's query vectors: spans encoded alone
        with torch.no_grad():
            targets = self._teacher_vectors(
                features, span_inputs, units.boundaries, starts, ends, valid
            )
        queries = nn.functional.normalize(phrases, dim=-1)
        student = queries @ nn.functional.normalize(in_context[valid], dim=-1).T
        teacher = nn.functional.normalize(targets.to(student.dtype), dim=-1)
        teacher = teacher @ teacher.T
        listwise = nn.functional.kl_div(
            nn.functional.log_softmax(student / self.temperature, dim=-1),
            nn.functional.log_softmax(teacher / self.temperature, dim=-1),
            log_target=True,
            reduction="batchmean",
        )
        cosine = nn.functional.mse_loss(student, teacher)
        parts = {
            "listwise": self.weight * self.listwise_weight * listwise,
            "cosine": self.weight * self.cosine_weight * cosine,
        }
        if any(torch.isnan(value) for value in parts.values()):
            raise FloatingPointError(
                "SpanScoreDistillationLoss is NaN: check the inputs and the learning rate."
            )
        return parts

    def _alone_means(self, inputs: dict[str, Tensor]) -> Tensor:
        """Mean of the non-special token vectors of ``[CLS] span [SEP]`` rows: what ``embed_texts`` gives for the span
        text."""
        tokens = self.model(dict(inputs))["token_embeddings"]
        mask = inputs["attention_mask"].clone()
        mask[:, 0] = 0
        mask[torch.arange(len(mask), device=mask.device), mask.sum(dim=1)] = (
            0  # [SEP] (the sum still counts [CLS])
        )
        mask = mask.to(tokens.dtype)
        return (tokens * mask[..., None]).sum(dim=1) / mask.sum(dim=1, keepdim=True).clamp(min=1)

    def _teacher_vectors(self, features, span_inputs, boundaries, starts, ends, valid) -> Tensor:
        device = features["input_ids"].device
        if next(self.teacher.parameters()).device != device:
            self.teacher.to(device)
        if self._ids_path:
            vectors = self.teacher(dict(span_inputs))["sentence_embedding"]
            return vectors.float()
        token_lo = boundaries.gather(1, starts.clamp(min=0))
        token_hi = boundaries.gather(1, ends.clamp(min=0))
        ids = features["input_ids"].tolist()
        rows = torch.nonzero(valid, as_tuple=True)[0].tolist()
        pieces = [
            ids[row][lo:hi]
            for row, lo, hi in zip(rows, token_lo[valid].tolist(), token_hi[valid].tolist())
        ]
        strings = self.model.tokenizer.batch_decode(pieces, skip_special_tokens=True)
        vectors = self.teacher.encode(
            strings,
            batch_size=self.teacher_batch_size,
            convert_to_tensor=True,
            show_progress_bar=False,
        )
        return vectors.to(device).float()

    def get_config_dict(self) -> dict[str, Any]:
        return {
            "teacher": self.teacher_name,
            "spans_per_text": self.spans_per_text,
            "min_span": self.min_span,
            "max_span": self.max_span,
            "shifted_fraction": self.shifted_fraction,
            "max_shift": self.max_shift,
            "temperature": self.temperature,
            "listwise_weight": self.listwise_weight,
            "cosine_weight": self.cosine_weight,
            "weight": self.weight,
            "unit": self.unit,
        }

    @property
    def citation(self) -> str:
        return SLICE_CITATION
