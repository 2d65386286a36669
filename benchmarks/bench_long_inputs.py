"""Many tiny texts and one long single-line text through ``best_spans``: wall time and peak RSS (the default model).

python benchmarks/bench_long_inputs.py TEXTS WORDS    # e.g. 20000 100000: docs/results.md
"""

from __future__ import annotations

import argparse
import resource
import time

import slice_st

WORDS = "the dog barks at a man who plays the guitar while my bag was lost and the flight was delayed".split()


def peak_mb() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("texts", type=int, help="how many one-character texts")
    parser.add_argument("words", type=int, help="how many words in the one single-line text")
    args = parser.parse_args()
    model = slice_st.load_model()
    model.best_spans(["a"], ["a b c"], show_progress_bar=False)
    print(f"model loaded: peak RSS {peak_mb()} MB", flush=True)
    start = time.perf_counter()
    model.best_spans(["a dog"], ["a"] * args.texts, show_progress_bar=False)
    print(f"{args.texts} one-character texts: {time.perf_counter() - start:.1f} s", flush=True)
    text = " ".join(WORDS[i % len(WORDS)] for i in range(args.words))
    start = time.perf_counter()
    span = model.best_spans(["my bag was lost"], [text], show_progress_bar=False)[0][0][0].span
    seconds = time.perf_counter() - start
    print(
        f"one line of {args.words} words ({len(text)} chars): {seconds:.1f} s, {span!r}, peak RSS {peak_mb()} MB"
    )


if __name__ == "__main__":
    main()
