"""Training: SLICE runs on sentence-transformers' trainer (``trainer``) and Hub checks (``hub``); importing it is
light (no torch)."""

from slice_st.training.trainer import (
    PRESETS,
    SliceArguments,
    build_trainer,
    train,
    training_arguments,
)

__all__ = ["SliceArguments", "PRESETS", "training_arguments", "train", "build_trainer"]
