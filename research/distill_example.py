"""Span self-distillation with the plain sentence-transformers API: SLICE triplets and unlabeled passages, two losses.

    python -m research.distill_example --shared-data ../shared/data --steps 20 -o runs/distill-example

`slice-st train --distill-data ... [--train-data ...]` does the same with checkpoints, a dev evaluator
and presets; this script shows the pieces: a passages set from :func:`research.offline_data.offline_passages`
(or any texts through :func:`slice_st.data.passages.cut_passages`), :class:`slice_st.SpanDistillationLoss`
(teacher = a frozen copy of the base model), and sentence-transformers' multi-dataset training.
"""

import argparse

from datasets import DatasetDict
from sentence_transformers import SentenceTransformerTrainer, SentenceTransformerTrainingArguments

import slice_st
from research.offline_data import offline_passages, offline_training_triplets


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shared-data", default="../shared/data")
    parser.add_argument(
        "--dev",
        default=None,
        help="STS-B / STS-B-Context file whose sentences stay out of training",
    )
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("-o", "--output-dir", default="runs/distill-example")
    args = parser.parse_args()

    model = slice_st.config.enable_span_features(slice_st.load_model())
    model.max_seq_length = 128
    exclude = [f"{args.shared_data}/stsbenchmark/sts-dev.csv"] + ([args.dev] if args.dev else [])
    passages = offline_passages(args.shared_data, exclude_paths=exclude, limit=16 * args.steps)
    triplets = offline_training_triplets(
        args.shared_data, dev_path=exclude[0], limit=4 * args.steps
    )
    losses = {
        "slice": slice_st.SpanMaxCrossEntropyLoss(model, max_span=10),
        "distill": slice_st.SpanDistillationLoss(
            model, spans_per_text=12, max_span=20
        ),  # teacher: frozen copy, taken now
    }
    trainer = SentenceTransformerTrainer(
        model=model,
        args=SentenceTransformerTrainingArguments(
            output_dir=args.output_dir,
            max_steps=args.steps,
            per_device_train_batch_size=16,
            learning_rate=5e-5,
            multi_dataset_batch_sampler="proportional",
            report_to=[],
            save_strategy="no",
        ),
        train_dataset=DatasetDict(
            {
                "slice": triplets.select_columns(["anchor", "positive", "negative"]),
                "distill": passages,
            }
        ),
        loss=losses,
    )
    trainer.train()
    slice_st.save_slice_model(model, f"{args.output_dir}/final")
    print(
        model.best_spans(["plays the guitar"], ["Yesterday a man played the guitar badly."])[0][0][
            0
        ]
    )


if __name__ == "__main__":
    main()
