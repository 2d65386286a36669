"""The package layout (docs/layout.md): layers, no import cycles, the CLI on top, no cross-module private names.

The import graph is read from the source with ``ast`` (nothing is imported). It counts every import
statement, module-level **and inside functions** (a lazy import is still a dependency), and leaves out
only the blocks under ``if TYPE_CHECKING:`` (they never run). ``from slice_st.x import y`` depends on
the module ``slice_st.x.y`` when that is a module, else on ``slice_st.x``. Importing a sub-module runs its
package's ``__init__`` first; that implicit edge is not counted (Python allows it: the package is
already being imported), but a module that imports a *package* depends on everything its ``__init__``
imports.
"""

from __future__ import annotations

import ast
import importlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

import slice_st

PACKAGE_DIR = Path(slice_st.__file__).parent

#: The layers, lowest first. A module may import modules of its own group, and any module of a lower
#: layer; nothing else (no upward import, no import sideways into another group of the same layer).
LAYERS: list[list[str]] = [
    ["slice_st.errors"],  # every exception and warning class: no slice_st imports
    [
        "slice_st.spans",
        "slice_st.scoring",
        "slice_st.tokens",
        "slice_st.text",
        "slice_st.backends",
        "slice_st._attach",
        "slice_st.pretrained",
    ],  # foundation: imports only errors
    ["slice_st._rerank"],  # the default scorer's learned re-ranker (a private module: shared by encode and its tests)
    ["slice_st.config"],  # span settings saved with a model
    ["slice_st.card"],  # the SLICE model card (one path for every card slice-st writes)
    ["slice_st.loading"],  # model loading, saving, export, devices, fingerprints
    ["slice_st.encode"],  # encode_spans / best_spans
    ["slice_st.models", "slice_st.losses", "slice_st.data"],  # components
    ["slice_st.evaluation", "slice_st.index", "slice_st.experimental", "slice_st.pooling"],  # applications; experiments
    # under study; pooling: the deprecated path of SpanPooling, for checkpoints saved before 0.2
    ["slice_st.training", "slice_st.integrations"],  # workflows
    ["slice_st.serve"],  # the JSON API and search page: imported only by the CLI
    ["slice_st.cli"],  # the command line: imported by nothing in the library
]
FACADE = "slice_st"  # slice_st/__init__.py: lazy names; only the CLI may import it
#: Private modules holding helpers shared by several modules (imported by them, never part of the public API).
SHARED_PRIVATE = {"slice_st._rerank"}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE_DIR.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(path): path for path in sorted(PACKAGE_DIR.rglob("*.py"))}


MODULES = _modules()


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _import_nodes(tree: ast.AST):
    """Every Import/ImportFrom node, skipping ``if TYPE_CHECKING:`` bodies."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and _is_type_checking(node):
            stack.extend(node.orelse)
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        stack.extend(ast.iter_child_nodes(node))


def _imports(name: str, path: Path) -> list[tuple[str, str | None, int]]:
    """``(module depended on, imported name or None, line)`` for each slice_st import of one module."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = []
    for node in _import_nodes(tree):
        if isinstance(node, ast.Import):
            found += [(alias.name, None, node.lineno) for alias in node.names if alias.name.split(".")[0] == "slice_st"]
            continue
        base = node.module or ""
        if node.level:  # relative import
            anchor = package.split(".")
            anchor = anchor[: len(anchor) - node.level + 1]
            base = ".".join(anchor + ([base] if base else []))
        if base.split(".")[0] != "slice_st":
            continue
        for alias in node.names:
            submodule = f"{base}.{alias.name}"
            found.append((submodule, None, node.lineno) if submodule in MODULES else (base, alias.name, node.lineno))
    return found


GRAPH = {name: _imports(name, path) for name, path in MODULES.items()}


def _group(module: str) -> tuple[int, str]:
    best = None
    for level, groups in enumerate(LAYERS):
        for group in groups:
            if module == group or module.startswith(group + "."):
                if best is None or len(group) > len(best[1]):
                    best = (level, group)
    assert best is not None, f"{module} is in no layer: add it to LAYERS (and to docs/layout.md)"
    return best


def test_every_module_has_a_layer():
    for module in MODULES:
        if module != FACADE:
            _group(module)


def test_no_import_cycles():
    edges = {
        module: sorted({target for target, _, _ in imports if target in MODULES and target != module})
        for module, imports in GRAPH.items()
    }
    state: dict[str, int] = {}  # 1: on the stack, 2: done
    cycles = []

    def visit(module: str, trail: list[str]) -> None:
        state[module] = 1
        for target in edges[module]:
            if state.get(target) == 1:
                cycles.append(trail[trail.index(target) :] + [target] if target in trail else [module, target])
            elif target not in state:
                visit(target, trail + [target])
        state[module] = 2

    for module in edges:
        if module not in state:
            visit(module, [module])
    assert not cycles, "import cycles: " + "; ".join(" -> ".join(cycle) for cycle in cycles)


def test_library_never_imports_the_cli():
    bad = [
        f"{module}:{line} imports {target}"
        for module, imports in GRAPH.items()
        for target, _, line in imports
        if not module.startswith("slice_st.cli") and (target == "slice_st.cli" or target.startswith("slice_st.cli."))
    ]
    assert not bad, bad


def test_library_never_imports_the_server():
    bad = [
        f"{module}:{line} imports {target}"
        for module, imports in GRAPH.items()
        for target, _, line in imports
        if not module.startswith(("slice_st.serve", "slice_st.cli"))
        and (target == "slice_st.serve" or target.startswith("slice_st.serve."))
    ]
    assert not bad, bad


def test_no_private_names_across_modules():
    bad = [
        f"{module}:{line} imports {name} from {target}"
        for module, imports in GRAPH.items()
        for target, name, line in imports
        if name is not None and name.startswith("_") and not name.startswith("__") and target != module
    ]
    bad += [
        f"{module}:{line} imports private module {target}"
        for module, imports in GRAPH.items()
        for target, _, line in imports
        if any(part.startswith("_") and not part.startswith("__") for part in target.split("."))
        and module != FACADE
        and target not in SHARED_PRIVATE
    ]
    assert not bad, bad


def test_imports_follow_the_layers():
    bad = []
    for module, imports in GRAPH.items():
        if module == FACADE:
            continue
        level, group = _group(module)
        for target, _, line in imports:
            if target == FACADE:  # ``import slice_st`` for its lazy names: the top, only the CLI uses it
                if not module.startswith("slice_st.cli"):
                    bad.append(f"{module}:{line} imports the package facade (import from the defining module)")
                continue
            target_level, target_group = _group(target)
            if target_level > level or (target_level == level and target_group != group):
                bad.append(
                    f"{module}:{line} ({group}, layer {level}) imports {target} ({target_group}, layer {target_level})"
                )
    assert not bad, "imports against the layer order:\n" + "\n".join(bad)


def test_layers_are_documented_in_the_readme():
    readme = (PACKAGE_DIR.parent / "docs" / "layout.md").read_text(encoding="utf-8")
    layout = readme[readme.index("## Layout") :]
    for groups in LAYERS:
        for group in groups:
            short = group.removeprefix("slice_st.")
            assert short in layout, f"{short} missing from docs/layout.md 'Layout'"


# ------------------------------------------------------------------------------------- the package
def test_public_names_and_dir():
    for name in slice_st.__all__:
        assert getattr(slice_st, name) is not None
    assert set(slice_st.__all__) <= set(dir(slice_st))
    with pytest.raises(AttributeError):
        slice_st.no_such_name  # noqa: B018


def test_old_package_paths_keep_their_names():
    from slice_st.evaluation import (  # noqa: F401  # noqa: F401
        SCORERS,
        SETUPS,
        SetupResult,
        SpanRetrievalEvaluator,
        compare_to_best,
        correlations,
        ngram_offsets,
        score_full,
        score_ngram,
        score_single,
        williams_test,
    )
    from slice_st.index import (  # noqa: F401  # noqa: F401
        INDEX_FORMAT_VERSION,
        LOCK_FILE,
        MANIFEST,
        IndexMatch,
        ShardedSpanIndex,
        SpanIndex,
        model_fingerprint,
        model_identity,
        shard_directories,
    )
    from slice_st.losses import SLICE_CITATION, SpanMaxCrossEntropyLoss, column_span_scores  # noqa: F401
    from slice_st.training import PRESETS, SliceArguments, train, training_arguments  # noqa: F401


def test_old_span_pooling_path_loads_with_a_deprecation_warning():
    """Checkpoints saved before 0.2 name ``slice_st.pooling.SpanPooling`` in modules.json: that path still imports."""
    sys.modules.pop("slice_st.pooling", None)
    with pytest.warns(DeprecationWarning, match="slice_st.pooling is deprecated"):
        module = importlib.import_module("slice_st.pooling")
    assert module.SpanPooling is slice_st.SpanPooling
    assert f"{slice_st.SpanPooling.__module__}.SpanPooling" == "slice_st.models.span_pooling.SpanPooling"  # saved now


def test_old_flat_module_paths_are_gone():
    for old in ("slice_st.train", "slice_st.corpus", "slice_st.index_cli"):
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


def test_pyproject_lists_every_subpackage():
    import tomllib

    config = tomllib.loads((PACKAGE_DIR.parent / "pyproject.toml").read_text(encoding="utf-8"))
    listed = set(config["tool"]["setuptools"]["packages"])
    packages = {_module_name(path.parent / "__init__.py") for path in PACKAGE_DIR.rglob("__init__.py")}
    assert packages <= listed, sorted(packages - listed)
