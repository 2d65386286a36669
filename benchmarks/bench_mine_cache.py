"""``slice-st mine`` twice on an unchanged folder: the second run (the cache of encoded files) against the first.

    python benchmarks/bench_mine_cache.py                      # the licences in /usr/share/common-licenses
    python benchmarks/bench_mine_cache.py --corpus DIR --repeats 3 --threads 1   # a busy machine: steadier
    python benchmarks/bench_mine_cache.py --package-licences --threads 1         # and the venv's licences

Each round runs the command as a user does (a new process: imports, model load, reading, search, output): **first**
into an empty cache folder, **second** the same command again (the cache now holds every file), and **no-cache**
(``--no-cache``: what every run cost before the cache), interleaved; medians and the ratio first / second (target
>= 5) are printed, and whether the three printed the same matches. The corpus: every regular file of ``--corpus``
(default: the Debian licence texts, hard-wrapped, ~37,000 words; ``--package-licences`` adds those of the installed
packages), each text once, copied as ``NNN-NAME.txt`` into a temporary folder.
"""

from __future__ import annotations

import argparse
import glob
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import time

from _common import REPO_ROOT, environment_line, load_line, median, run_interleaved

DEFAULT_CORPUS = "/usr/share/common-licenses"
QUERIES = ("you may not sue", "there is no warranty")


def copy_corpus(source: str, folder: str, package_licences: bool = False) -> tuple[int, int]:
    """Every regular file (no links) of ``source`` as ``folder/NNN-NAME.txt``, and with ``package_licences`` the
    licence files of the installed packages (``*.dist-info/**/LICENSE*``), each text once; returns (files, words)."""
    paths = [os.path.join(source, name) for name in sorted(os.listdir(source))]
    if package_licences:
        site = os.path.dirname(os.path.dirname(importlib.util.find_spec("numpy").origin))
        paths += sorted(
            glob.glob(os.path.join(site, "*.dist-info", "**", "LICEN[CS]E*"), recursive=True)
        )
    seen: set[str] = set()
    files = words = 0
    for path in paths:
        if os.path.islink(path) or not os.path.isfile(path):
            continue
        with open(path, encoding="utf-8", errors="replace") as handle:
            text = handle.read()
        if " ".join(text.split()) in seen:
            continue
        seen.add(" ".join(text.split()))
        files, words = files + 1, words + len(text.split())
        with open(
            os.path.join(folder, f"{files:03d}-{os.path.basename(path)}.txt"), "w", encoding="utf-8"
        ) as handle:
            handle.write(text)
    return files, words


def mine(folder: str, *options: str, threads: int | None = None) -> tuple[float, str]:
    """Wall seconds of one ``slice-st mine`` process, and what it printed."""
    command = [sys.executable, "-m", "slice_st.cli", "mine", folder, "--no-progress", "-f", "jsonl"]
    for query in QUERIES:
        command += ["-q", query]
    environment = os.environ | {"PYTHONPATH": str(REPO_ROOT), "HF_HUB_OFFLINE": "1"}
    if (
        threads is not None
    ):  # slice-st's own switch (--threads), for steadier numbers on a busy machine
        environment["SLICE_ST_THREADS"] = str(threads)
    start = time.perf_counter()
    done = subprocess.run(
        [*command, *options], capture_output=True, text=True, env=environment, check=False
    )
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"slice-st mine failed ({done.returncode}):\n{done.stderr}")
    return seconds, done.stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", default=DEFAULT_CORPUS, help="a folder of text files")
    parser.add_argument("--repeats", type=int, default=2, help="interleaved rounds")
    parser.add_argument("--threads", type=int, help="torch threads of each run (default: torch's)")
    parser.add_argument(
        "--package-licences",
        action="store_true",
        help="add the licence files of the installed packages",
    )
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="bench-mine-cache-")
    try:
        folder = os.path.join(work, "corpus")
        os.mkdir(folder)
        files, words = copy_corpus(args.corpus, folder, args.package_licences)
        print(environment_line())
        threads = args.threads or "torch's default"
        print(
            f"corpus: {files} files, {words:,} words from {args.corpus}; queries {QUERIES}; default model; ",
            end="",
        )
        print(f"threads: {threads}\n")
        outputs: dict[str, set[str]] = {"first": set(), "second": set(), "no-cache": set()}
        state = {"round": 0}

        def first() -> dict:
            state["round"] += 1
            cache = os.path.join(work, f"cache-{state['round']}")
            seconds, out = mine(folder, "--cache-dir", cache, threads=args.threads)
            outputs["first"].add(out)
            return {"wall": seconds}

        def second() -> dict:
            seconds, out = mine(
                folder,
                "--cache-dir",
                os.path.join(work, f"cache-{state['round']}"),
                threads=args.threads,
            )
            outputs["second"].add(out)
            return {"wall": seconds}

        def no_cache() -> dict:
            seconds, out = mine(folder, "--no-cache", threads=args.threads)
            outputs["no-cache"].add(out)
            return {"wall": seconds}

        runs = run_interleaved(
            {"first": first, "second": second, "no-cache": no_cache}, args.repeats
        )
        walls = {name: median(run["wall"] for run in found) for name, found in runs.items()}
        same = len(set().union(*outputs.values())) == 1
        print(
            f"\nmedian wall: first {walls['first']:.1f} s, second {walls['second']:.1f} s, ", end=""
        )
        print(f"no-cache {walls['no-cache']:.1f} s")
        print(
            f"second-run speed-up: first / second = {walls['first'] / walls['second']:.1f}x (target >= 5); ",
            end="",
        )
        print(f"no-cache / second = {walls['no-cache'] / walls['second']:.1f}x")
        print(
            f"first / no-cache = {walls['first'] / walls['no-cache']:.2f} (the cost of writing the cache)"
        )
        print(
            f"the three printed the same matches: {'yes' if same else 'NO'}; {load_line()} at end"
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
