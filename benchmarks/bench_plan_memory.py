"""Peak memory of planning windows (``slice_st.tokens.plan_windows``) for one long single line, alone and beside many
short texts: tokenized in pieces (now) against every text tokenized whole in one padded call (before), each in its
own process, side by side.

python benchmarks/bench_plan_memory.py                # 1,000,000 words alone; 200 texts + 200,000 words
"""

from __future__ import annotations

import resource
import subprocess
import sys

WORDS = "the dog barks at a man who plays the guitar while my bag was lost and the flight was delayed".split()
CASES = [(0, 1_000_000), (200, 200_000)]


def child(how: str, texts: int, words: int) -> None:
    from transformers import AutoTokenizer

    import slice_st.tokens as tokens
    from slice_st.loading import default_model_path

    tokenizer = AutoTokenizer.from_pretrained(default_model_path())
    if how == "whole":  # one call, every text whole: what planning did before
        tokens.PLAN_PIECE_CHARS = tokens.PLAN_GROUP_CHARS = 10**12
    line = " ".join(WORDS[i % len(WORDS)] for i in range(words))
    batch = ["a man plays the guitar on a stage " * 9] * texts + [line]
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    windows = tokens.plan_windows(tokenizer, batch, 254, 20, 16)
    peak = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base) // 1024
    print(f"{len(windows)} {peak}")


def main() -> None:
    if len(sys.argv) == 5 and sys.argv[1] == "--child":
        child(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
        return
    for texts, words in CASES:
        found = {}
        for how in ("whole", "pieces"):
            done = subprocess.run(
                [sys.executable, __file__, "--child", how, str(texts), str(words)],
                capture_output=True,
                text=True,
            )
            found[how] = done.stdout.split()
        assert found["whole"][0] == found["pieces"][0], found  # the same windows
        whole, pieces = int(found["whole"][1]), int(found["pieces"][1])
        print(
            f"{texts} short texts + one line of {words} words ({found['pieces'][0]} windows): planning peak "
            f"+{whole} MB whole, +{pieces} MB in pieces ({whole / max(pieces, 1):.0f}x)"
        )


if __name__ == "__main__":
    main()
