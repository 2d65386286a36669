"""Import hooks of the ``slice_st`` package: old module paths, and the ``SentenceTransformer`` methods.

* :class:`AliasFinder` keeps the module paths of the flat layout importable: ``import slice_st.pooling``
  gives the module ``slice_st.models.span_pooling`` itself (the same object, so monkeypatching and
  ``isinstance`` behave), without a file per old path. Old paths that became subpackages
  (``slice_st.index``, ``slice_st.losses``, ``slice_st.evaluation``, ``slice_st.data``) need no alias.
* :func:`attach_when_imported` adds ``encode_spans``/``encode_span_queries``/``best_spans`` to ``SentenceTransformer`` as soon
  as ``sentence_transformers`` is imported (at once if it already is), so ``import slice_st`` stays
  light (no torch) and ``import slice_st; SentenceTransformer(...).encode_spans(...)`` still works.

Standard library only: this module is imported by ``slice_st/__init__.py`` on every import.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
from collections.abc import Callable

__all__ = ["ALIASES", "AliasFinder", "install", "attach_when_imported"]

#: Old module path → the module that now holds its code.
ALIASES: dict[str, str] = {
    "slice_st.pooling": "slice_st.models.span_pooling",
    "slice_st.distillation": "slice_st.losses.span_distillation",
    "slice_st.corpus": "slice_st.data.corpus",
    "slice_st.passages": "slice_st.data.passages",
    "slice_st.training_data": "slice_st.data.triplets",
    "slice_st.baselines": "slice_st.evaluation.baselines",
    "slice_st.table": "slice_st.evaluation.table",
    "slice_st.calibration": "slice_st.index.calibration",
    "slice_st.train": "slice_st.training.trainer",
    "slice_st.hub": "slice_st.training.hub",
    "slice_st.mteb_tasks": "slice_st.integrations.mteb",
    "slice_st.index_cli": "slice_st.cli.index",
}


class AliasFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Resolve an old dotted name of :data:`ALIASES` to the new module object."""

    def __init__(self, aliases: dict[str, str]) -> None:
        self.aliases = aliases
        self._specs: dict[str, object] = {}

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in self.aliases:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec):
        module = importlib.import_module(self.aliases[spec.name])
        self._specs[module.__name__] = module.__spec__
        return module

    def exec_module(self, module) -> None:
        # The import system has just set ``module.__spec__`` to the alias's spec: give the module its own back.
        module.__spec__ = self._specs.get(module.__name__, module.__spec__)


class _AfterImport(importlib.abc.MetaPathFinder):
    """Run ``callback`` once, right after the module ``name`` has been executed (a post-import hook)."""

    def __init__(self, name: str, callback: Callable[[], None]) -> None:
        self.name, self.callback = name, callback

    def find_spec(self, fullname, path=None, target=None):
        if fullname != self.name:
            return None
        for finder in sys.meta_path:  # the spec the other finders give
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        if spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        spec.loader = _CallbackLoader(spec.loader, self)
        return spec

    def fire(self) -> None:
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        self.callback()


class _CallbackLoader(importlib.abc.Loader):
    """A loader that runs the real one, then the hook (every other attribute is the real loader's)."""

    def __init__(self, loader, hook: _AfterImport) -> None:
        self._loader, self._hook = loader, hook

    def __getattr__(self, name):
        return getattr(self._loader, name)

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module) -> None:
        self._loader.exec_module(module)
        module.__loader__ = self._loader
        if module.__spec__ is not None:
            module.__spec__.loader = self._loader
        self._hook.fire()


def attach_when_imported(name: str, callback: Callable[[], None]) -> None:
    """Call ``callback`` now if module ``name`` is imported, else right after its first import."""
    if name in sys.modules:
        callback()
        return
    if not any(isinstance(finder, _AfterImport) and finder.name == name for finder in sys.meta_path):
        sys.meta_path.insert(0, _AfterImport(name, callback))


def install() -> None:
    """Put the :class:`AliasFinder` on ``sys.meta_path`` (once)."""
    if not any(isinstance(finder, AliasFinder) for finder in sys.meta_path):
        sys.meta_path.append(AliasFinder(ALIASES))
