"""Train a SLICE model: the same as `slice-st train`, as a script `accelerate launch` can run.

python examples/train_slice.py -o runs/slice-minilm --preset cpu-minilm --train-data msmarco:triples.tsv --dev dev.tsv
accelerate launch --num_processes 2 examples/train_slice.py -o runs/slice-minilm --train-data msmarco:triples.tsv
"""

import sys

from slice_st.cli import main

if __name__ == "__main__":
    sys.exit(main(["train", *sys.argv[1:]]))
