"""mypy over the package against a baseline that may only shrink, and over the README's Python examples (no baseline).

    python tools/check_types.py            # make lint: fails on an error not in tools/mypy-baseline.txt, on a baseline
                                           # entry that no longer occurs (shrink it: --update), and on any README error
    python tools/check_types.py --update   # rewrite the baseline from today's errors, refused if that would add any

A baseline entry is mypy's line without its line number (``path: error: message  [code]``), so edits elsewhere in a
file do not invalidate it; an entry counts as many times as it occurs. mypy's settings are in pyproject.toml.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BASELINE = ROOT / "tools" / "mypy-baseline.txt"
ERROR = re.compile(r"^(?P<path>[^:\s]+\.py):(?P<line>\d+): (?P<rest>error: .*)$")


def mypy(*targets: str) -> list[str]:
    """mypy's error lines for ``targets`` (run from the repository root, its pyproject.toml settings)."""
    command = [sys.executable, "-m", "mypy", "--no-error-summary", "--no-pretty", *targets]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    if done.returncode not in (0, 1):  # 2: mypy itself failed (bad settings, a crash)
        raise SystemExit(f"mypy failed:\n{done.stdout}{done.stderr}")
    return [line for line in done.stdout.splitlines() if ERROR.match(line)]


def entry(line: str) -> str:
    match = ERROR.match(line)
    return f"{match['path']}: {match['rest']}" if match else line


def readme_examples() -> str:
    """The README's ```python blocks, in order, as one module (later blocks use the names of earlier ones)."""
    blocks = re.findall(
        r"^```python\n(.*?)^```", (ROOT / "README.md").read_text(encoding="utf-8"), re.M | re.S
    )
    return "\n".join(blocks)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--update", action="store_true", help="rewrite the baseline (it may only shrink)"
    )
    args = parser.parse_args()
    now = Counter(entry(line) for line in mypy("slice_st"))
    kept = (
        Counter(BASELINE.read_text(encoding="utf-8").splitlines())
        if BASELINE.is_file()
        else Counter()
    )
    new, fixed = now - kept, kept - now
    if args.update:
        if new and BASELINE.is_file():
            print(
                "Not updating: the baseline may only shrink; fix these first:",
                *new.elements(),
                sep="\n",
            )
            return 1
        BASELINE.write_text(
            "".join(f"{line}\n" for line in sorted(now.elements())), encoding="utf-8"
        )
        print(
            f"{BASELINE.relative_to(ROOT)}: {sum(now.values())} errors ({sum(fixed.values())} fewer)"
        )
        return 0
    with tempfile.TemporaryDirectory() as folder:
        example = Path(folder) / "readme_examples.py"
        example.write_text(readme_examples(), encoding="utf-8")
        # the blocks share one module, so a later one may reuse a name for a value of another type
        lines = mypy("--allow-redefinition", str(example))
        # the package's own errors are the baseline's; here only the examples' (mypy reports the modules it follows)
        readme = [
            line.replace(str(example), "README.md (python blocks)")
            for line in lines
            if str(example) in line
        ]
    for title, lines in (
        (
            "New mypy errors in slice_st (fix them; the baseline only shrinks):",
            list(new.elements()),
        ),
        (
            "Fixed, still in the baseline (run python tools/check_types.py --update):",
            list(fixed.elements()),
        ),
        ("mypy errors in the README's examples:", readme),
    ):
        if lines:
            print(title, *lines, sep="\n  ")
    print(
        f"mypy: {sum(now.values())} errors in slice_st (baseline {sum(kept.values())}), {len(readme)} in the README"
    )
    return 1 if new or fixed or readme else 0


if __name__ == "__main__":
    sys.exit(main())
