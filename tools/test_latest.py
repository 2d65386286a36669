"""`make test-latest`: install the newest versions our ranges allow into a fresh venv, run the fast suite there,
and report which packages moved against the lock, which newer releases our ranges hold back, and what broke.

The lock (requirements/lock.txt) is what CI and `make install` test; this is how we find drift before users do.
torch stays at the lock's CPU build: it is the platform the suite runs on, not a dependency that drifts here.
Exit status: 0 when the suite passes on the newest versions, 1 when something broke.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PIN = re.compile(r"^([A-Za-z0-9_.\-]+)==([^\s;]+)")


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def read_lock(path: Path) -> dict[str, str]:
    pins = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        match = PIN.match(line)
        if match:
            pins[canonical(match.group(1))] = match.group(2)
    return pins


def installed(uv: str, python: Path) -> dict[str, str]:
    out = subprocess.run(
        [uv, "pip", "list", "--python", str(python), "--format", "json"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return {canonical(row["name"]): row["version"] for row in json.loads(out)}


def held_back(uv: str, python: Path, indexes: list[str]) -> list[tuple[str, str, str]]:
    """Packages with a newer release than the one our ranges (or their dependents') let the resolver take."""
    done = subprocess.run(
        [uv, "pip", "list", "--python", str(python), "--outdated", "--format", "json", *indexes],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        return []
    rows = json.loads(done.stdout or "[]")
    return [
        (canonical(r["name"]), r["version"], r["latest_version"])
        for r in rows
        if r["name"] != "slice-st"
    ]


def build_venv(uv: str, venv: Path, lock: dict[str, str], indexes: list[str]) -> Path:
    shutil.rmtree(venv, ignore_errors=True)
    subprocess.run([uv, "venv", "-q", "--python", sys.executable, str(venv)], check=True)
    python = venv / "bin" / "python"
    torch = f"torch=={lock['torch']}"
    subprocess.run(
        [
            uv,
            "pip",
            "install",
            "-q",
            "--python",
            str(python),
            "--upgrade",
            *indexes,
            "-e",
            ".[all,dev]",
            torch,
        ],
        cwd=ROOT,
        check=True,
    )
    return python


def run_suite(python: Path, report: Path) -> tuple[int, list[str]]:
    command = [str(python), "-m", "pytest", "-q", "-m", "not slow", "-p", "no:cacheprovider"]
    command += ["--doctest-modules", "slice_st", "tests", f"--junitxml={report}"]
    code = subprocess.run(command, cwd=ROOT, check=False).returncode
    failed = []
    if report.exists():
        import xml.etree.ElementTree as ET

        for case in ET.parse(report).iter("testcase"):
            problem = case.find("failure")
            if problem is None:
                problem = case.find("error")
            if problem is not None:
                first = (problem.get("message") or "").strip().splitlines()[:1]
                failed.append(
                    f"{case.get('classname')}::{case.get('name')}: {first[0] if first else ''}"[
                        :300
                    ]
                )
    return code, failed


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--uv", default="uv")
    parser.add_argument("--lock", default="requirements/lock.txt")
    parser.add_argument("--venv", default=".venv-latest")
    args, indexes = parser.parse_known_args(argv)
    lock = read_lock(ROOT / args.lock)
    python = build_venv(args.uv, ROOT / args.venv, lock, indexes)
    now = installed(args.uv, python)
    code, failed = run_suite(python, ROOT / args.venv / "junit.xml")
    print("\n== make test-latest: the newest versions our ranges allow, against the lock ==")
    moved = [(n, lock[n], v) for n, v in sorted(now.items()) if n in lock and lock[n] != v]
    new = [(n, v) for n, v in sorted(now.items()) if n not in lock and n != "slice-st"]
    print(f"moved ({len(moved)}):" if moved else "moved: nothing; the lock is current")
    for name, old, version in moved:
        print(f"  {name}: {old} -> {version}")
    for name, version in new:
        print(f"  {name}: new, {version}")
    back = held_back(args.uv, python, indexes)
    print(f"held back by the ranges ({len(back)}):" if back else "held back by the ranges: nothing")
    for name, version, latest in back:
        print(f"  {name}: {version} installed, {latest} released")
    print("fast suite: passed" if code == 0 else f"fast suite: FAILED ({len(failed)} tests)")
    for line in failed:
        print(f"  {line}")
    return 0 if code == 0 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
