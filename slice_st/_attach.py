"""Post-import hook: ``encode_spans``/``encode_span_queries``/``best_spans`` become ``SentenceTransformer`` methods as
soon as ``sentence_transformers`` is imported, so ``import slice_st`` stays light (standard library only)."""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
from collections.abc import Callable


class _AfterImport(importlib.abc.MetaPathFinder):
    """Run ``callback`` once, right after the module ``name`` has been executed."""

    def __init__(self, name: str, callback: Callable[[], None]) -> None:
        self.name, self.callback = name, callback

    def find_spec(self, fullname, path=None, target=None):
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)  # the spec the other finders give
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        execute = spec.loader.exec_module

        def exec_module(module) -> None:
            execute(module)
            if self in sys.meta_path:
                sys.meta_path.remove(self)
                self.callback()

        spec.loader.exec_module = exec_module  # a loader made for this spec alone
        return spec


def attach_when_imported(name: str, callback: Callable[[], None]) -> None:
    """Call ``callback`` now if module ``name`` is imported, else right after its first import."""
    if name in sys.modules:
        callback()
    elif not any(
        isinstance(finder, _AfterImport) and finder.name == name for finder in sys.meta_path
    ):
        sys.meta_path.insert(0, _AfterImport(name, callback))
