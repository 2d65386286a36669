"""Shared helpers for the slice_st benchmarks: deterministic passages/queries, timing, environment.

Passages are built from real English sentences (STS-benchmark train split, read in place from
``--sts``; never copied into the repo). When that file is missing a small built-in generated corpus
is used instead and the scripts say so. Everything is seeded, so two runs see the same inputs.
"""

from __future__ import annotations

import csv
import os
import platform
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_STS = (REPO_ROOT / ".." / "shared" / "data" / "stsbenchmark" / "sts-train.csv").resolve()


# --------------------------------------------------------------------------------------------- data
def read_sts_sentences(path: str | os.PathLike) -> list[str]:
    """Unique sentences (columns 5 and 6) of an STS-benchmark TSV, in file order."""
    sentences: list[str] = []
    seen: set[str] = set()
    with open(path, encoding="utf-8", newline="") as handle:
        for row in csv.reader(handle, delimiter="\t", quoting=csv.QUOTE_NONE):
            for sentence in row[5:7]:
                sentence = " ".join(sentence.split())
                if len(sentence.split()) >= 3 and sentence not in seen:
                    seen.add(sentence)
                    sentences.append(sentence)
    return sentences


_SUBJECTS = [
    "A man",
    "A woman",
    "The child",
    "Two dogs",
    "A young girl",
    "The old farmer",
    "A chef",
    "The team",
    "A musician",
    "Several students",
    "The pilot",
    "A small cat",
    "The doctor",
]
_VERBS = [
    "is playing",
    "was cutting",
    "is riding",
    "watched",
    "is cooking",
    "repaired",
    "is reading",
    "carried",
    "is painting",
    "cleaned",
    "is climbing",
    "sold",
    "is feeding",
]
_OBJECTS = [
    "a guitar",
    "an onion",
    "a horse",
    "the old bridge",
    "some noodles",
    "a broken bicycle",
    "a long novel",
    "the heavy boxes",
    "a blue fence",
    "the kitchen floor",
    "a steep hill",
    "fresh vegetables",
    "the hungry ducks",
]
_TAILS = [
    "in the park.",
    "on a sunny morning.",
    "near the river.",
    "with great care.",
    "before dinner.",
    "at the market.",
    "while it rained.",
    "for the first time.",
    "in front of a crowd.",
    "quickly.",
]


def generated_sentences(count: int = 2000, seed: int = 1234) -> list[str]:
    """Fallback corpus: simple template sentences (used only when the STS file is missing)."""
    rng = random.Random(seed)
    return [
        f"{rng.choice(_SUBJECTS)} {rng.choice(_VERBS)} {rng.choice(_OBJECTS)} {rng.choice(_TAILS)}"
        for _ in range(count)
    ]


def load_sentences(sts_path: str | os.PathLike | None) -> tuple[list[str], str]:
    """Sentences and a one-line description of where they came from."""
    path = Path(sts_path) if sts_path else DEFAULT_STS
    if path.is_file():
        sentences = read_sts_sentences(path)
        if len(sentences) >= 100:
            return sentences, f"STS-benchmark sentences from {path} ({len(sentences)} unique)"
    sentences = generated_sentences()
    return sentences, (
        f"WARNING: {path} not found or too small; using the built-in GENERATED template corpus "
        f"({len(sentences)} sentences). Numbers are still valid timings but not on real text."
    )


def build_passages_and_queries(
    sentences: list[str],
    n_passages: int,
    words: int = 40,
    n_queries: int = 8,
    seed: int = 0,
    query_words: tuple[int, int] = (3, 5),
) -> tuple[list[str], list[str]]:
    """``n_passages`` passages of exactly ``words`` whitespace words, and ``n_queries`` short phrases.

    Sentences are shuffled with ``seed``; queries are phrases (``query_words`` words) cut from a
    held-out tail of sentences that never appear in passages. Passages concatenate consecutive
    shuffled sentences (cycling if needed) and are cut to ``words`` words.
    """
    rng = random.Random(seed)
    pool = list(sentences)
    rng.shuffle(pool)
    held_out = max(n_queries * 4, len(pool) // 10)
    query_pool, passage_pool = pool[:held_out], pool[held_out:]
    queries = []
    for sentence in query_pool:
        tokens = [w.strip(".,;:!?\"'()") for w in sentence.split()]
        tokens = [w for w in tokens if w]
        length = rng.randint(*query_words)
        if len(tokens) < length:
            continue
        start = rng.randrange(len(tokens) - length + 1)
        queries.append(" ".join(tokens[start : start + length]))
        if len(queries) == n_queries:
            break
    passages = []
    cursor = 0
    for _ in range(n_passages):
        buffer: list[str] = []
        while len(buffer) < words:
            if cursor == len(passage_pool):
                rng.shuffle(passage_pool)
                cursor = 0
            buffer.extend(passage_pool[cursor].split())
            cursor += 1
        passages.append(" ".join(buffer[:words]))
    return passages, queries


# -------------------------------------------------------------------------------------------- model
def add_model_arguments(parser) -> None:
    """``--model`` and where it runs: ``--backend``, ``--quantized``, ``--model-file``, ``--model-dtype``,
    ``--export-dir``."""
    parser.add_argument(
        "--model",
        default=None,
        help="model id or path (default: the library's, slice-minilm; 'base': all-MiniLM-L6-v2)",
    )
    parser.add_argument("--backend", choices=("torch", "onnx", "openvino"), default="torch")
    parser.add_argument(
        "--quantized", action="store_true", help="with --backend onnx: the dynamic-int8 file"
    )
    parser.add_argument("--model-file", default=None, help="exported file inside the model folder")
    parser.add_argument(
        "--model-dtype",
        choices=("float32", "float16", "bfloat16"),
        default=None,
        help="torch weights' precision, or OpenVINO's inference precision",
    )
    parser.add_argument(
        "--export-dir",
        default=None,
        help="with --backend onnx/openvino: where the export is made (once) and loaded from",
    )


def load_bench_model(args, threads: int | None = None):
    """The model the arguments of :func:`add_model_arguments` describe, and a one-line description of it."""
    import slice_st

    options = {
        "backend": args.backend,
        "model_file": args.model_file,
        "quantized": args.quantized,
        "dtype": args.model_dtype,
        "export_dir": args.export_dir,
    }
    if args.backend != "torch":
        options["threads"] = threads
    model_path = args.export_dir if args.backend != "torch" and args.export_dir else args.model
    options = {key: value for key, value in options.items() if value not in (None, False)}
    model = slice_st.load_model(model_path, **options)
    runner = getattr(model[0], "model", None)
    where = (
        f"{args.backend} ({getattr(runner, 'path', '')}, {getattr(runner, 'threads', '?')} threads)"
        if args.backend != "torch"
        else "torch"
    )
    return model, f"{where}{', ' + args.model_dtype if args.model_dtype else ''}"


# ------------------------------------------------------------------------------------------- timing
class Stopwatch:
    """Accumulates wall time of wrapped calls (for breakdowns inside a library call)."""

    def __init__(self) -> None:
        self.total = 0.0
        self.calls = 0

    def wrap(self, function: Callable) -> Callable:
        def timed(*args, **kwargs):
            start = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                self.total += time.perf_counter() - start
                self.calls += 1

        timed.__wrapped__ = function
        return timed


def run_interleaved(
    cases: dict[str, Callable[[], dict]], repeats: int | dict[str, int], log=print
) -> dict[str, list[dict]]:
    """Run ``cases`` round-robin (a, b, c, a, b, c, ...). Each case returns a dict that must hold
    ``"wall"`` (seconds) and may hold other timings. Returns every repetition's dict per case."""
    counts = {name: repeats if isinstance(repeats, int) else repeats[name] for name in cases}
    results: dict[str, list[dict]] = {name: [] for name in cases}
    for rep in range(max(counts.values())):
        for name, case in cases.items():
            if rep < counts[name]:
                out = case()
                results[name].append(out)
                log(f"  rep {rep + 1}: {name:<28} {out['wall']:8.3f} s")
    return results


def median(values) -> float:
    values = list(values)
    return statistics.median(values) if values else float("nan")


def git_state() -> str:
    """Short commit of the repo and whether slice_st/ has uncommitted changes (the library may be moving)."""
    import subprocess

    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", "slice_st"],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "git n/a"
    return f"git {commit or 'n/a'}{' + uncommitted slice_st changes' if dirty else ''}"


def load_line() -> str:
    """1-minute load average: on a shared 2-core machine anything far above 2 means noisy timings."""
    try:
        return f"loadavg {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs"
    except OSError:
        return "loadavg n/a"


def environment_line() -> str:
    import sentence_transformers
    import torch

    line = (
        f"python {platform.python_version()} | torch {torch.__version__} (threads={torch.get_num_threads()}) | "
        f"sentence-transformers {sentence_transformers.__version__} | {platform.machine()} "
        f"{os.cpu_count()} logical CPUs | device cpu | {git_state()} | {load_line()} at start"
    )
    try:
        busy = os.getloadavg()[0] > (os.cpu_count() or 1) and torch.get_num_threads() > 1
    except OSError:
        busy = False
    if busy:
        line += (
            "\nWARNING: the machine is already loaded; torch's OpenMP threads then wait on each other and every "
            "small op "
            "slows down a lot. Ratios stay comparable within this run, but consider --threads 1 for steadier numbers."
        )
    return line


def flush() -> None:
    sys.stdout.flush()
