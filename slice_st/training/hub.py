"""Hugging Face Hub: SLICE model cards (from ``model_card/template.md``) and pushing checkpoints.

Everything goes through ``huggingface_hub.HfApi`` (``create_repo`` and ``upload_folder``); the API
object can be passed in, which is how the tests check pushes without leaving the machine.
"""

from __future__ import annotations

import dataclasses
import os
from importlib.resources import files
from typing import Any

from transformers import TrainerCallback

from slice_st.config import get_span_config
from slice_st.losses.span_max_cross_entropy import SLICE_CITATION

__all__ = ["render_model_card", "push_model", "HubPushCallback", "TRAINER_STATE_FILES"]

#: Files of a trainer checkpoint that are resume state, not the model: never pushed.
TRAINER_STATE_FILES = ["optimizer.pt", "scheduler.pt", "rng_state*.pth", "training_args.bin", "trainer_state.json", "scaler.pt"]


def render_model_card(
    model,
    repo_id: str,
    *,
    config: Any = None,
    metrics: dict[str, float] | None = None,
    metrics_title: str | None = None,
    license: str = "apache-2.0",
) -> str:
    """The model card (README.md) of a SLICE model, rendered from ``model_card/template.md``.

    ``config`` is the :class:`~slice_st.training.TrainConfig` (training details); ``metrics`` the
    evaluator's latest results (e.g. ``{"dev_single_spearman": 0.71}``).

    >>> from slice_st import load_model
    >>> card = render_model_card(load_model(), "org/slice-minilm", metrics={"dev_single_spearman": 0.5})
    >>> "SentenceTransformer(\\"org/slice-minilm\\")" in card, "| dev_single_spearman | 0.5000 |" in card
    (True, True)
    """
    import jinja2
    from sentence_transformers.base.modules import Normalize

    template = files("slice_st.model_card").joinpath("template.md").read_text(encoding="utf-8")
    span = get_span_config(model)
    training = dataclasses.asdict(config) if dataclasses.is_dataclass(config) else config
    loss_config = {"scale": 30.0, "min_span": span.min_span, "max_span": span.max_span, "unit": span.unit}
    if training:
        loss_config.update({key: training[key] for key in ("scale", "min_span", "max_span", "unit") if key in training})
    distill_config = None
    if training and training.get("distill_data"):
        distill_config = {
            "teacher": training.get("teacher") or "frozen copy of the base model",
            **{key: training[key] for key in ("distill_spans", "distill_max_span", "distill_metric", "distill_text_weight", "distill_weight") if key in training},
        }
    uses_slice = not training or bool(training.get("train_data")) or not training.get("distill_data")
    base_model = (training or {}).get("model") or getattr(model.model_card_data, "base_model", None) or "sentence-transformers/all-MiniLM-L6-v2"
    environment = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    return environment.from_string(template).render(
        repo_id=repo_id,
        base_model=base_model,
        license=license,
        span=span,
        normalize=any(isinstance(module, Normalize) for module in model),
        dimension=model[0].get_embedding_dimension(),
        max_seq_length=model.max_seq_length,
        loss_config=loss_config,
        distill_config=distill_config,
        uses_slice=uses_slice,
        training=training,
        metrics=metrics or {},
        metrics_title=metrics_title,
        citation=SLICE_CITATION.strip(),
    )


def push_model(
    folder: str,
    repo_id: str,
    *,
    model,
    config: Any = None,
    metrics: dict[str, float] | None = None,
    commit_message: str = "Upload SLICE model",
    api=None,
    private: bool | None = None,
) -> None:
    """Write the SLICE model card into ``folder`` and upload the folder's model files to ``repo_id``."""
    from huggingface_hub import HfApi

    api = api if api is not None else HfApi()
    card = render_model_card(model, repo_id, config=config, metrics=metrics)
    with open(os.path.join(folder, "README.md"), "w", encoding="utf-8") as handle:
        handle.write(card)
    api.create_repo(repo_id, exist_ok=True, private=private)
    api.upload_folder(repo_id=repo_id, folder_path=folder, commit_message=commit_message, ignore_patterns=TRAINER_STATE_FILES)


class HubPushCallback(TrainerCallback):
    """Push every checkpoint the trainer saves (model files and a SLICE card; resume state stays local).

    Only the main process pushes. The latest evaluation metrics go into the card.
    """

    def __init__(self, repo_id: str, model, *, config: Any = None, api=None) -> None:
        self.repo_id, self.model, self.config, self.api = repo_id, model, config, api
        self.metrics: dict[str, float] = {}

    def on_evaluate(self, args, state, control, metrics=None, **kwargs):
        if metrics:
            self.metrics = {key.removeprefix("eval_"): value for key, value in metrics.items() if isinstance(value, (int, float))}

    def on_save(self, args, state, control, **kwargs):
        if not state.is_world_process_zero:
            return
        folder = os.path.join(args.output_dir, f"checkpoint-{state.global_step}")
        if os.path.isdir(folder):
            push_model(
                folder, self.repo_id, model=self.model, config=self.config, metrics=self.metrics,
                commit_message=f"Checkpoint at step {state.global_step}", api=self.api,
            )
