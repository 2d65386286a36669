"""The package layout (docs/layout.md): the layers and acyclic sub-packages (import-linter, with the contracts in
pyproject.toml), the facade imported only by the CLI, no cross-module private names, a small public API.
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


def _graph():
    import grimp

    return grimp.build_graph("slice_st", exclude_type_checking_imports=True)


def test_import_contracts_hold(capsys):
    """The layers and the acyclic sub-packages of pyproject.toml ([tool.importlinter]), checked by import-linter; it
    reads every import, those inside functions too, but not those under ``if TYPE_CHECKING:``."""
    from importlinter.cli import lint_imports

    status = lint_imports(config_filename=str(ROOT / "pyproject.toml"), no_cache=True, no_logo=True)
    assert status == 0, capsys.readouterr().out[-4000:]


def test_every_module_has_a_layer():
    layers = PYPROJECT["tool"]["importlinter"]["contracts"][0]["layers"]
    groups = {group.strip() for layer in layers for group in layer.split("|")}
    for module in _graph().modules:
        if module != FACADE:
            assert any(module == g or module.startswith(g + ".") for g in groups), f"{module} is in no layer"


def test_only_the_cli_imports_the_facade():
    importers = _graph().find_modules_that_directly_import(FACADE)
    assert {m for m in importers if not m.startswith("slice_st.cli")} == set(), "import from the defining module"


def _imported_names(path: Path):
    """``(module, name, line)`` of every ``from slice_st… import name`` in a file."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("slice_st"):
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


def test_layers_are_documented():
    layout = (ROOT / "docs" / "layout.md").read_text(encoding="utf-8")
    layout = layout[layout.index("## Layout") :]
    for layer in PYPROJECT["tool"]["importlinter"]["contracts"][0]["layers"]:
        for group in layer.split("|"):
            short = group.strip().removeprefix("slice_st.")
            assert f"`{short}`" in layout, f"{short} missing from docs/layout.md 'Layout'"


# ------------------------------------------------------------------------------------- the package
def test_public_api_is_small():
    """At most 21 top-level names and 150 ``__all__`` entries in the whole package (what users are recommended)."""
    entries = 0
    for path in PACKAGE_DIR.rglob("*.py"):
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__all__" for t in node.targets):
                entries += len(ast.literal_eval(node.value))  # a literal list, so that tools can read it
    assert len(slice_st.__all__) <= 21 and entries <= 150, (len(slice_st.__all__), entries)
    assert list(slice_st.__all__) == list(slice_st._EXPORTS)


def test_functions_are_short_enough_to_read():
    """No function of the package is over 80 lines, from ``def`` to its last line (docstring included)."""
    long = [
        f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({node.end_lineno - node.lineno + 1} lines)"
        for path in PACKAGE_DIR.rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno + 1 > 80
    ]
    assert not long, long


def test_public_names_and_dir():
    for name in slice_st.__all__:
        assert getattr(slice_st, name) is not None
    assert set(slice_st.__all__) <= set(dir(slice_st))
    with pytest.raises(AttributeError):
        slice_st.no_such_name  # noqa: B018


def test_old_flat_module_paths_are_gone():
    for old in ("slice_st.train", "slice_st.corpus", "slice_st.index_cli", "slice_st.pooling", "slice_st.experimental"):
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
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-3000:]


def test_pyproject_lists_every_subpackage_and_research_is_not_installed():
    listed = set(PYPROJECT["tool"]["setuptools"]["packages"])
    packages = {".".join(path.parent.relative_to(ROOT).parts) for path in PACKAGE_DIR.rglob("__init__.py")}
    assert packages <= listed, sorted(packages - listed)
    assert not any(name.split(".")[0] == "research" for name in listed)
    assert (PACKAGE_DIR / "py.typed").is_file() and "py.typed" in PYPROJECT["tool"]["setuptools"]["package-data"][
        "slice_st"
    ]
