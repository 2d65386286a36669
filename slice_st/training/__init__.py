"""Training: the trainer builder and presets (``trainer``), Hub pushes and the model card (``hub``).

Importing this package is light (no torch); ``slice_st.training.hub`` (the SLICE model card, Hub checks)
imports ``sentence_transformers``.
"""

from slice_st.training.trainer import PRESETS, TrainConfig, build_trainer, config_from_args, train

__all__ = ["TrainConfig", "PRESETS", "train", "build_trainer", "config_from_args"]
