"""Post-import hook: ``encode_spans``/``encode_span_queries``/``best_spans`` become ``SentenceTransformer`` methods as
soon as ``sentence_transformers`` is imported, so ``import slice_st`` stays light (standard library only).
"""

from __future__ import annotations

import importlib.abc
import sys
from collections.abc import Callable


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
