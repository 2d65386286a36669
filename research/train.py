"""``slice-st train`` on the shared data sets: ``--train-data offline[:DIR]`` and ``--distill-data offline[:DIR]``.

``offline`` builds SLICE triplets (SNLI, STS-B train in context) and distillation passages (STS-B, SNLI) from the
shared data folder: data whose licence allows commercial use (CC BY-SA 4.0). ``paper`` adds the paper's other sets
(SICK, PPDB, ParaBank: non-commercial or unlicensed; not for weights you ship). Both come from
:mod:`research.offline_data`, keeping every dev sentence out; the rest is ``slice-st train`` (the same options,
``--preset`` and ``--config``). The recipes of the results page are argument files in ``research/presets/``
(``make model`` runs ``cpu-minilm-slice.json``, ``make model-mpnet`` ``cpu-mpnet-slice.json``):

python -m research.train --config research/presets/cpu-minilm-slice.json -o runs/slice-minilm --shared-data DATA \
    --dev DATA/stsb_context/stsb-context-dev.tsv --sts-dev DATA/stsbenchmark/sts-dev.csv
"""

from __future__ import annotations

import argparse
import os
import sys

from research._cli import handle
from slice_st.card import OFFLINE_SOURCES

#: The recipes of the results page, as argument files.
RECIPES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "presets")


def _data_dir(source: str, shared_data: str | None) -> tuple[str, str]:
    """``(data folder, set name)`` of an ``offline[:DIR]`` or ``paper[:DIR]`` data option."""
    name = source.split(":", 1)[0]
    if name not in OFFLINE_SOURCES:
        raise ValueError(
            f"{source!r}: research.train trains on offline[:DIR] or paper[:DIR] data; train on your own with "
            "slice-st train"
        )
    data_dir = source.split(":", 1)[1] if ":" in source else shared_data
    if not data_dir:
        raise ValueError(
            f"{name} training data needs the data folder: give {name}:DIR or --shared-data DIR."
        )
    return data_dir, name


def offline_datasets(settings, shared_data: str | None, seed: int) -> dict:
    """``{"slice": triplets, "distill": passages}`` (those asked for) from the ``offline`` sources of ``settings``,
    shuffled and cut to the run's limits as ``slice-st train`` does with its own data."""
    import datasets

    from research.offline_data import offline_passages, offline_training_triplets
    from slice_st.training.trainer import evaluation_files, first_rows

    parts = {}
    if settings.train_data:
        triplets = []
        for source in settings.train_data:
            folder, name = _data_dir(source, shared_data)
            dev = os.path.join(folder, "stsbenchmark", "sts-dev.csv")
            triplets.append(
                offline_training_triplets(
                    folder,
                    sources=OFFLINE_SOURCES[name]["slice"],
                    dev_path=dev if os.path.exists(dev) else None,
                    seed=seed,
                )
            )
        columns = ["anchor", "positive", "negative"]
        joined = datasets.concatenate_datasets([part.select_columns(columns) for part in triplets])
        parts["slice"] = first_rows(joined.shuffle(seed=seed), settings.train_limit)
    if settings.distill_data:
        folders = [_data_dir(source, shared_data) for source in settings.distill_data]
        # Sentences of the dev files and of every data folder's STS-B dev (the dev set is built from it) stay out.
        excluded = evaluation_files(
            settings,
            *(os.path.join(folder, "stsbenchmark", "sts-dev.csv") for folder, _ in folders),
        )
        words = {"min_words": settings.passage_min_words, "max_words": settings.passage_max_words}
        passages = [
            offline_passages(
                folder,
                sources=OFFLINE_SOURCES[name]["distill"],
                exclude_paths=excluded,
                seed=seed,
                **words,
            )
            for folder, name in folders
        ]
        joined = datasets.concatenate_datasets([part.select_columns(["text"]) for part in passages])
        parts["distill"] = first_rows(joined.shuffle(seed=seed), settings.distill_limit)
    return parts


def _train_command(args) -> int:
    from slice_st.cli.train import parse_train_arguments
    from slice_st.training.trainer import check_train_output, train

    training, settings = parse_train_arguments(args)
    if not settings.objectives:
        raise ValueError(
            "no training data: give --train-data offline[:DIR] and/or --distill-data offline[:DIR]."
        )
    check_train_output(training.output_dir, resume=settings.resume, overwrite=settings.overwrite)
    parts = offline_datasets(settings, args.shared_data, training.seed)
    if len(parts) == 1:
        dataset = next(iter(parts.values()))
    else:
        import datasets

        dataset = datasets.DatasetDict(parts)
    train(
        training, settings, train_dataset=dataset
    )  # the card names the offline sources of settings
    return 0


def main(argv: list[str] | None = None) -> int:
    from slice_st.training import trainer

    parser = argparse.ArgumentParser(
        prog="python -m research.train",
        allow_abbrev=False,
        description=__doc__.split("\n\n")[0],
        epilog="Every other option is slice-st train's (slice-st train --help).",
    )
    parser.add_argument("-o", "--output-dir", dest="output_dir", help="the run's folder")
    parser.add_argument(
        "--shared-data", help="the data folder of 'offline' sources given without :DIR"
    )
    parser.add_argument("--preset", choices=sorted(trainer.PRESETS), help="a slice-st train preset")
    parser.add_argument(
        "--config",
        metavar="FILE",
        help="an argument file, e.g. research/presets/cpu-minilm-slice.json",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")
    args, rest = parser.parse_known_args(argv)
    args.trainer_arguments = rest
    return handle(parser, _train_command, args)


if __name__ == "__main__":
    sys.exit(main())
