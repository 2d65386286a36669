"""Add SNLI entailment pairs to the localisation experiment's training pairs (the fourth run in docs/results.md).

SNLI dev and test pairs labelled entailment (second sentence 4-20 words, no dev sentence), each second sentence placed
among on-topic neighbours exactly as ``localisation_loss.py`` places the STS-B/SICK ones (seed 1), appended to the
pairs that script wrote and shuffled. Like that script it needs ``slice_st.data.contexts`` (commit 12fcd76):

    PYTHONPATH=/tmp/at python experiments/localisation_snli_pairs.py runs/loc/pairs.json runs/loc-snli/pairs.json
    DATA=$DATA ANCHOR=20 PYTHONPATH=/tmp/at python experiments/localisation_loss.py runs/loc-snli 400 1e-4 20 1 200
"""

import json
import os
import random
import sys

from slice_st import load_model
from slice_st.data.contexts import _context_pool, on_topic_contexts
from slice_st.data.passages import evaluation_sentences, read_texts

source, target = sys.argv[1], sys.argv[2]
D = os.environ.get("DATA", "data")
excluded = evaluation_sentences([f"{D}/stsb_context/stsb-context-dev.tsv", f"{D}/stsbenchmark/sts-dev.csv"])


def norm(text):
    return " ".join(text.lower().split())


pairs = []
for split in ("dev", "test"):
    first = read_texts(f"{D}/snli/s1.{split}", detokenize=True)
    second = read_texts(f"{D}/snli/s2.{split}", detokenize=True)
    with open(f"{D}/snli/labels.{split}", encoding="utf-8") as handle:
        labels = [line.strip() for line in handle]
    pairs += [
        (a, b)
        for a, b, label in zip(first, second, labels)
        if label == "entailment" and 4 <= len(b.split()) <= 20 and norm(a) not in excluded and norm(b) not in excluded
    ]
random.Random(0).shuffle(pairs)
pool = [
    text
    for text in dict.fromkeys(_context_pool(D, [p[0] for p in pairs] + [p[1] for p in pairs]))
    if norm(text) not in excluded and 3 <= len(text.split()) <= 30
]
contexts = on_topic_contexts([p[1] for p in pairs], pool, load_model("base"), avoid=[p[0] for p in pairs], seed=1)
added = [dict(query=a, passage=c.text, start=c.start, end=c.end) for (a, b), c in zip(pairs, contexts)]
with open(source, encoding="utf-8") as handle:
    everything = json.load(handle) + added
random.Random(2).shuffle(everything)
os.makedirs(os.path.dirname(target) or ".", exist_ok=True)
with open(target, "w", encoding="utf-8") as handle:
    json.dump(everything, handle)
print(f"{len(added)} SNLI pairs added: {len(everything)} in all")
