"""Training: the trainer builder and presets (``trainer``), Hub pushes and the model card (``hub``).

Importing this package is light (no torch); ``slice_st.training.hub`` (the SLICE model card, Hub checks)
imports ``sentence_transformers``.
"""

from slice_st.training.trainer import PRESETS, SliceArguments, build_trainer, train, training_arguments

__all__ = ["SliceArguments", "PRESETS", "training_arguments", "train", "build_trainer"]
