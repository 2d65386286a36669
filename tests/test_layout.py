"""The package layout (docs/layout.md): the import contracts of pyproject.toml (import-linter: every module in a
layer, no cycle, the facade imported only by the CLI, private modules kept in their package), no private name used
across modules or from the lab, a small public API.
"""

from __future__ import annotations

import ast
import importlib
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import slice_st

PACKAGE_DIR = Path(slice_st.__file__).parent
ROOT = PACKAGE_DIR.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
FACADE = "slice_st"  # slice_st/__init__.py: lazy names; only the CLI may import it


def test_import_contracts_hold():
    """``lint-imports`` with the contracts of pyproject.toml ([tool.importlinter]); it reads every import, those inside
    functions too, but not those under ``if TYPE_CHECKING:``. In a process of its own: import-linter reconfigures
    logging, which would hide later tests' log records."""
    code = "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())"
    command = [sys.executable, "-c", code, "--no-cache", "--config", str(ROOT / "pyproject.toml")]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]


def _imported_names(path: Path):
    """``(module, name, line)`` of every ``from slice_st… import name`` in a file."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if (
            isinstance(node, ast.ImportFrom)
            and node.level == 0
            and (node.module or "").startswith("slice_st")
        ):
            for alias in node.names:
                yield node.module, alias.name, node.lineno


def test_no_private_names_across_modules():
    """A helper two modules share lives under a public name (in the lowest layer that needs it), or in a private
    ``_module`` of their sub-package; no module reaches into another for its ``_private`` names."""
    bad = [
        f"{path.relative_to(ROOT)}:{line} imports {name} from {module}"
        for path in PACKAGE_DIR.rglob("*.py")
        for module, name, line in _imported_names(path)
        if name.startswith("_") and not name.startswith("__") and not _is_module(f"{module}.{name}")
    ]
    assert not bad, bad


def _is_module(dotted: str) -> bool:
    path = ROOT.joinpath(*dotted.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def _private(part: str) -> bool:
    return part.startswith("_") and not part.startswith("__")


def _private_uses(path: Path):
    """``(line, dotted name)`` of every private module or name of slice_st a file uses: imported
    (``from slice_st.spans import _x``, ``import slice_st._mod``) or reached as an attribute (``slice_st._mod``,
    ``spans._x`` after ``from slice_st import spans``)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    bound = set()  # local names of what was imported from slice_st
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in (a for a in node.names if a.name.split(".")[0] == "slice_st"):
                bound.add(alias.asname or "slice_st")
                if any(map(_private, alias.name.split("."))):
                    yield node.lineno, alias.name
        elif (
            isinstance(node, ast.ImportFrom)
            and node.level == 0
            and (node.module or "").split(".")[0] == "slice_st"
        ):
            for alias in node.names:
                bound.add(alias.asname or alias.name)
                if any(map(_private, f"{node.module}.{alias.name}".split("."))):
                    yield node.lineno, f"{node.module}.{alias.name}"
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr):
            chain, base = [node.attr], node.value
            while isinstance(base, ast.Attribute):
                chain, base = [base.attr, *chain], base.value
            if isinstance(base, ast.Name) and base.id in bound:
                yield node.lineno, ".".join([base.id, *chain])


def test_the_lab_uses_no_private_name_of_the_package():
    """research/ and benchmarks/ run on the public API (or copy a small helper): nothing private of slice_st."""
    bad = [
        f"{path.relative_to(ROOT)}:{line} uses {name}"
        for folder in ("research", "benchmarks", "examples")
        for path in sorted((ROOT / folder).rglob("*.py"))
        for line, name in _private_uses(path)
    ]
    assert not bad, "\n".join(bad)


def test_the_private_use_scan_finds_each_form(tmp_path):
    lab = tmp_path / "lab.py"
    lab.write_text(
        "import slice_st\nimport slice_st._attach as hook\nfrom slice_st import spans\n"
        "from slice_st.spans import _gather_rows, prefix_sums\n"
        "slice_st._rerank.MOVES\nspans._start_mask\nprefix_sums.__doc__\nother._x\n"
    )
    assert sorted(_private_uses(lab)) == [
        (2, "slice_st._attach"),
        (4, "slice_st.spans._gather_rows"),
        (5, "slice_st._rerank"),
        (6, "spans._start_mask"),
    ]


def test_layers_are_documented():
    layout = (ROOT / "docs" / "layout.md").read_text(encoding="utf-8")
    layout = layout[layout.index("## Layout") :]
    for layer in PYPROJECT["tool"]["importlinter"]["contracts"][0]["layers"]:
        for group in layer.split("|"):
            short = group.strip()
            assert f"`{short}`" in layout, f"{short} missing from docs/layout.md 'Layout'"


# ------------------------------------------------------------------------------------- the package
def test_public_api_is_small():
    """At most 21 top-level names and 150 ``__all__`` entries in the whole package (what users are recommended)."""
    entries = 0
    for path in PACKAGE_DIR.rglob("*.py"):
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.Assign) and any(
                getattr(t, "id", None) == "__all__" for t in node.targets
            ):
                entries += len(
                    ast.literal_eval(node.value)
                )  # a literal list, so that tools can read it
    assert len(slice_st.__all__) <= 21 and entries <= 150, (len(slice_st.__all__), entries)
    assert list(slice_st.__all__) == list(slice_st._EXPORTS)


def test_functions_are_short_enough_to_read():
    """No function of the package is over 80 lines, from ``def`` to its last line (docstring included)."""
    long = [
        f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({node.end_lineno - node.lineno + 1} lines)"
        for path in PACKAGE_DIR.rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        and node.end_lineno - node.lineno + 1 > 80
    ]
    assert not long, long


def test_public_names_and_dir():
    for name in slice_st.__all__:
        assert getattr(slice_st, name) is not None
    assert set(slice_st.__all__) <= set(dir(slice_st))
    with pytest.raises(AttributeError):
        slice_st.no_such_name  # noqa: B018


def test_old_flat_module_paths_are_gone():
    for old in (
        "slice_st.train",
        "slice_st.corpus",
        "slice_st.index_cli",
        "slice_st.pooling",
        "slice_st.experimental",
    ):
        with pytest.raises(ModuleNotFoundError):
            importlib.import_module(old)


def test_methods_attached_when_sentence_transformers_was_imported_first():
    from sentence_transformers import SentenceTransformer

    assert SentenceTransformer.encode_spans is slice_st.encode_spans
    assert SentenceTransformer.best_spans is slice_st.best_spans


def test_import_is_light_and_methods_attach_on_later_import():
    """In a fresh interpreter: ``import slice_st`` and the CLI parser load no torch; importing ST later attaches the
    methods."""
    code = (
        "import sys, slice_st, slice_st.cli\n"
        "slice_st.cli.build_parser()\n"
        "heavy = sorted(m for m in ('torch', 'sentence_transformers', 'transformers', 'numpy') if m in sys.modules)\n"
        "assert not heavy, heavy\n"
        "from sentence_transformers import SentenceTransformer\n"
        "assert SentenceTransformer.encode_spans is slice_st.encode_spans\n"
        "assert SentenceTransformer.best_spans is slice_st.best_spans\n"
        "import sentence_transformers\n"
        "assert type(sentence_transformers.__loader__).__name__ == 'SourceFileLoader', "
        "sentence_transformers.__loader__\n"
        "print('ok')\n"
    )
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-3000:]
