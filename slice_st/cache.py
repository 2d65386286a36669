"""A cache of encoded files (``slice-st mine``): :func:`best_spans_of_files` is :func:`slice_st.best_spans` over the
texts of several files, each file's forward pass kept in an :class:`EncodingCache` entry under a key of its texts, the
model and every setting that changes its vectors, so that a second search of unchanged files runs no forward pass.

An entry holds what ``model.encode`` gave for each of the file's windows (token vectors, masks, character offsets, in
the model's dtypes): replayed through the same search, the matches are the first run's, bit for bit. (A ``SpanIndex``
keeps only each word's summed vector and the span norms: its search ranks documents another way than ``best_spans``.)
Entries are written atomically and checked on every read (a checksum over every byte); one that does not check out
is encoded again and replaced. Least recently used entries go once the folder holds more than its size limit.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
from collections.abc import Sequence
from contextlib import suppress
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from slice_st.backends import backend_of
from slice_st.encode import model_window, resolve_prompt, resolve_span_config
from slice_st.errors import FileAccessError, SpanInputError, WindowError
from slice_st.files import atomic_file, open_regular_file
from slice_st.loading import model_fingerprint, model_identity
from slice_st.search import SpanSearchResult, best_spans
from slice_st.tokens import WINDOW_CONTEXT, plan_windows

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

__all__ = ["EncodingCache", "best_spans_of_files", "default_cache_dir"]

#: The entries' layout and the key's fields; another value makes every older entry a miss.
CACHE_FORMAT = 1
#: The cache folder (default: ``$XDG_CACHE_HOME/slice-st/mine``, ``~/.cache/slice-st/mine``).
CACHE_ENV = "SLICE_ST_CACHE"
#: The folder's size limit: bytes, or a number with K, M, G or T (powers of 1024).
SIZE_ENV = "SLICE_ST_CACHE_SIZE"
DEFAULT_MAX_BYTES = 4 << 30
#: A file of more characters is searched without the cache (its entry: about 1.5 KB per token at d=384).
MAX_FILE_CHARS = 500_000
#: Files are searched in blocks of about this many characters: batches span files, memory stays bounded.
BLOCK_CHARS = 200_000
#: A temporary file older than this was left by a run that died: the next pruning removes it.
STALE_SECONDS = 24 * 3600
#: The outputs of ``model.encode(output_value=None)`` that span encoding reads, and how an entry stores them.
_STORED = {
    "token_embeddings": None,
    "attention_mask": np.int8,
    "special_tokens_mask": np.int8,
    "offset_mapping": np.int32,
}
_ENTRY = re.compile(r"[0-9a-f]{64}\.npz")
# files.atomic_file's names for our entries
_TEMPORARY = re.compile(r"\.[0-9a-f]{64}\.npz\.[0-9a-f]{16}\.tmp")
_SIZE = re.compile(r"(\d+(?:\.\d+)?)\s*([KMGT]?)i?B?", re.IGNORECASE)
_LOCK_FILE = ".lock"


def default_cache_dir() -> str:
    """``$SLICE_ST_CACHE``, else ``$XDG_CACHE_HOME/slice-st/mine`` (``~/.cache/slice-st/mine``), as Hugging Face and
    torch keep theirs."""
    if os.environ.get(CACHE_ENV):
        return os.environ[CACHE_ENV]
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "slice-st", "mine")


def parse_size(text: str) -> int:
    """Bytes of a size such as ``"4G"``, ``"500M"``, ``"1.5GiB"`` or ``"1000000"`` (powers of 1024).

    >>> parse_size("4G"), parse_size("500 MB"), parse_size("0")
    (4294967296, 524288000, 0)
    """
    found = _SIZE.fullmatch(str(text).strip())
    if found is None:
        raise SpanInputError(
            f"{SIZE_ENV}={text!r}: not a size (bytes, or a number with K, M, G or T, e.g. 4G)."
        )
    number, unit = found.groups()
    return int(float(number) * 1024 ** ("KMGT".find(unit.upper()) + 1 if unit else 0))


class EncodingCache:
    """A folder of encoded files, each under a key of its texts, the model and the settings (see the module).

    Args:
        path: The folder (created when first written; default :func:`default_cache_dir`).
        max_bytes: Its size limit (default ``$SLICE_ST_CACHE_SIZE``, else 4 GiB); 0 keeps nothing.

    Reading never fails a search: an entry missing, unreadable or not checking out is a miss (counted in ``rebuilt``
    when it was there), and a folder that cannot be written is used read-only (``problem`` says why).
    """

    def __init__(self, path: str | os.PathLike | None = None, max_bytes: int | None = None) -> None:
        self.path = os.fspath(path) if path is not None else default_cache_dir()
        if max_bytes is None:
            size = os.environ.get(SIZE_ENV)
            max_bytes = parse_size(size) if size else DEFAULT_MAX_BYTES
        if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 0:
            raise SpanInputError(f"max_bytes must be a non-negative integer, got {max_bytes!r}.")
        if os.path.exists(self.path) and not os.path.isdir(self.path):
            raise FileAccessError(
                f"the cache folder {self.path} is a file, not a folder; name a folder."
            )
        self.max_bytes = max_bytes
        self.hits = self.misses = 0
        self.rebuilt: list[str] = []  # keys of entries that were there but did not check out
        self.problem: str | None = None  # why entries could not be written (the first failure)

    def __repr__(self) -> str:
        return f"EncodingCache({self.path!r}, max_bytes={self.max_bytes})"

    def settings(
        self, model: SentenceTransformer, max_span: int, unit: str, prompt: str, context: int
    ) -> str:
        """The digest of what, besides a file's texts, decides its windows' vectors: the model (name, weights and
        tokenizer), its backend and dtype, the window, the longest span and the unit (they cut the windows)."""
        tokenizer = model.tokenizer
        fields = {
            "format": CACHE_FORMAT,
            "model": model_identity(model)[0],
            "fingerprint": model_fingerprint(model),
            "backend": backend_of(model),
            "dtype": str(getattr(model, "dtype", "")),
            "tokenizer": [type(tokenizer).__name__, len(tokenizer), _tokenizer_digest(tokenizer)],
            "window": model_window(model),
            "context": context,
            "max_span": max_span,
            "unit": unit,
            "prompt": prompt,
        }
        return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()

    @staticmethod
    def key(settings: str, texts: Sequence[str]) -> str:
        """The entry of one file: its texts (each length-prefixed) under ``settings``."""
        digest = hashlib.sha256(settings.encode())
        for text in texts:
            data = text.encode("utf-8", "surrogatepass")
            digest.update(len(data).to_bytes(8, "little") + data)
        return digest.hexdigest()

    def entry_path(self, key: str) -> str:
        return os.path.join(self.path, f"{key}.npz")

    def load(self, key: str) -> dict[bytes, dict[str, torch.Tensor]] | None:
        """The windows' outputs of an entry (window digest → outputs), or ``None`` (a miss)."""
        path = self.entry_path(key)
        try:
            with open_regular_file(path) as handle:  # a link is refused, never followed
                entry = _read_entry(handle, key)
        except FileNotFoundError:
            self.misses += 1
            return None
        except Exception:  # noqa: BLE001 - any damage (zip, npy, checksum, shape…) makes a miss, never a failure
            self.misses += 1
            self.rebuilt.append(key)
            return None
        self.hits += 1
        with suppress(OSError):  # least recently used goes first; a read-only folder is still read
            os.utime(path)
        return entry

    def save(self, key: str, windows: list[tuple[bytes, dict[str, torch.Tensor]]]) -> None:
        """Write an entry atomically (a reader sees the old one or the new one, never half of it)."""
        if self.problem is not None or self.max_bytes == 0:
            return
        try:
            os.makedirs(self.path, mode=0o700, exist_ok=True)
            with atomic_file(self.entry_path(key)) as handle:
                np.savez(handle, **_entry_arrays(key, windows))  # type: ignore[arg-type]  # names → arrays
        # read-only, full disk, a folder where the entry goes: searched all the same
        except OSError as error:
            self.problem = f"cannot write the cache in {self.path} ({error.strerror or error})"

    def prune(self) -> None:
        """Remove the least recently used entries until the folder holds at most ``max_bytes``, and temporary files
        of runs that died; only names this cache writes, and only one process at a time (the others skip it)."""
        from filelock import FileLock, Timeout

        if not os.path.isdir(self.path):
            return
        try:
            lock = FileLock(os.path.join(self.path, _LOCK_FILE))
            lock.acquire(timeout=0)
        except (Timeout, OSError):
            return
        try:
            entries, now = [], time.time()
            for item in os.scandir(self.path):
                with suppress(OSError):
                    found = item.stat(follow_symlinks=False)
                    if _TEMPORARY.fullmatch(item.name) and item.is_file(follow_symlinks=False):
                        if now - found.st_mtime > STALE_SECONDS:
                            os.unlink(item.path)
                    elif _ENTRY.fullmatch(item.name) and item.is_file(follow_symlinks=False):
                        entries.append((found.st_mtime, found.st_size, item.path))
            total = sum(size for _, size, _ in entries)
            for _, size, path in sorted(entries):
                if total <= self.max_bytes:
                    break
                with suppress(OSError):  # a reader that opened it keeps reading it
                    os.unlink(path)
                    total -= size
        finally:
            lock.release()


def _tokenizer_digest(tokenizer) -> str:
    """The fast tokenizer's pipeline (normalizer, pre-tokenizer, model, vocabulary); not the truncation and padding
    that each call sets on it."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    state = json.loads(backend.to_str()) if backend is not None else {}
    state = {key: value for key, value in state.items() if key not in ("truncation", "padding")}
    return hashlib.sha256(json.dumps(state, sort_keys=True).encode()).hexdigest()


def _checksum(arrays: dict[str, np.ndarray]) -> np.ndarray:
    digest = hashlib.sha256()
    for name in sorted(arrays):
        values = np.ascontiguousarray(arrays[name])
        digest.update(f"{name}|{values.dtype.str}|{values.shape}|".encode())
        digest.update(values.tobytes())
    return np.frombuffer(digest.digest(), dtype=np.uint8).copy()


def _entry_arrays(
    key: str, windows: list[tuple[bytes, dict[str, torch.Tensor]]]
) -> dict[str, np.ndarray]:
    """An entry's arrays: the windows' digests and token counts, each output concatenated, its dtypes, a checksum."""
    first = windows[0][1] if windows else {}
    dtypes = (
        {name: str(first[name].dtype).removeprefix("torch.") for name in _STORED} if windows else {}
    )
    meta = json.dumps({"format": CACHE_FORMAT, "key": key, "dtypes": dtypes}).encode()
    digests = b"".join(digest for digest, _ in windows)
    lengths = [len(outputs["attention_mask"]) for _, outputs in windows]
    arrays: dict[str, np.ndarray] = {
        "digests": np.frombuffer(digests, np.uint8).reshape(-1, 32),
        "lengths": np.array(lengths, dtype=np.int64),
        "meta": np.frombuffer(meta, np.uint8),
    }
    for name, stored in _STORED.items():
        parts = [outputs[name] for _, outputs in windows]
        # numpy has none: float32 holds it exactly
        if stored is None and parts and parts[0].dtype == torch.bfloat16:
            parts = [part.float() for part in parts]
        values = torch.cat(parts).numpy() if parts else np.zeros(0, dtype=np.float32)
        arrays[name] = values.astype(stored) if stored is not None else values
    return arrays | {"checksum": _checksum(arrays)}


def _read_entry(handle, key: str) -> dict[bytes, dict[str, torch.Tensor]]:
    """The windows of an entry file, checked (key, format, shapes, checksum); any damage raises."""
    with np.load(handle, allow_pickle=False) as data:
        arrays = {name: data[name] for name in ("digests", "lengths", "meta", "checksum", *_STORED)}
    checksum = arrays.pop("checksum")
    if not np.array_equal(checksum, _checksum(arrays)):
        raise ValueError("checksum")
    meta = json.loads(arrays["meta"].tobytes().decode("utf-8"))
    lengths, digests = arrays["lengths"], arrays["digests"]
    if meta.get("format") != CACHE_FORMAT or meta.get("key") != key or len(digests) != len(lengths):
        raise ValueError("another entry")
    bounds = np.concatenate([[0], np.cumsum(lengths)])
    if (lengths < 0).any() or any(len(arrays[name]) != bounds[-1] for name in _STORED):
        raise ValueError("shapes")
    tensors = {
        name: torch.from_numpy(arrays[name]).to(getattr(torch, meta["dtypes"][name]))
        for name in _STORED
    }
    return {
        bytes(digests[row]): {
            name: values[bounds[row] : bounds[row + 1]] for name, values in tensors.items()
        }
        for row in range(len(lengths))
    }


def window_digest(prompt: str, window: str) -> bytes:
    """What identifies one window's forward pass besides the settings: its prompt and its text."""
    return hashlib.sha256(
        f"{len(prompt)}:{prompt}{window}".encode("utf-8", "surrogatepass")
    ).digest()


class _Replay:
    """The model as span encoding sees it, with ``encode`` serving each window (prompt and text) from ``memo``: what
    is missing is encoded by the model in one call and kept there (on the CPU, its padding cut off)."""

    def __init__(self, model: SentenceTransformer) -> None:
        self._model = model
        self.memo: dict[bytes, dict[str, torch.Tensor]] = {}
        self.encoded = 0  # windows (and queries) the model encoded

    def __getattr__(self, name: str) -> Any:
        return getattr(self._model, name)

    def __getitem__(self, item):
        return self._model[item]

    def __iter__(self):
        return iter(self._model)

    def __len__(self) -> int:
        return len(self._model)

    def encode(self, inputs, **kwargs):
        if kwargs.get("output_value", "") is not None or isinstance(inputs, str):
            return self._model.encode(inputs, **kwargs)
        prompt = kwargs.get("prompt") or ""
        digests = [window_digest(prompt, text) for text in inputs]
        missing = {digest: text for digest, text in zip(digests, inputs) if digest not in self.memo}
        if missing:
            for digest, outputs in zip(
                missing, self._model.encode(list(missing.values()), **kwargs)
            ):
                keep = outputs["attention_mask"].bool().cpu()
                self.memo[digest] = {name: outputs[name].cpu()[keep] for name in _STORED}
            self.encoded += len(missing)
        device = kwargs.get("device") or self._model.device
        return [
            {name: value.to(device) for name, value in self.memo[digest].items()}
            for digest in digests
        ]


def best_spans_of_files(
    model: SentenceTransformer,
    queries: str | Sequence[str],
    files: Sequence[Sequence[str]],
    cache: EncodingCache | None = None,
    **options: Any,
) -> SpanSearchResult:
    """:func:`slice_st.best_spans` over the texts of several files (``files[i]``: the texts of file ``i``), with each
    file's forward pass read from ``cache`` when it holds one for the same texts, model and settings, else run and
    written there (``None``: nothing read or written). The result is over all texts, in order; ``options`` are
    best_spans'. Files are searched in blocks (:data:`BLOCK_CHARS`), so a progress bar shows per block.

    Example:
        >>> cache = EncodingCache("runs/mine-cache")  # doctest: +SKIP
        >>> result = best_spans_of_files(model, ["no warranty"], [texts_of_a, texts_of_b], cache)  # doctest: +SKIP
    """
    lists: list[list[str]] = [list(texts) for texts in files]
    config = resolve_span_config(
        model, options.get("min_span"), options.get("max_span"), options.get("unit")
    )
    prompt = resolve_prompt(model, options.get("prompt"), options.get("prompt_name"), "document")
    context = options.get("window_context", WINDOW_CONTEXT)
    settings = ""
    if cache is not None:
        settings = cache.settings(model, config.max_span, config.unit, prompt, context)
    parts: list[SpanSearchResult] = []
    replay, texts = _Replay(model), [text for file in lists for text in file]
    if not texts:
        return best_spans(model, queries, [], **options)
    for block in _blocks(lists):
        base = sum(len(part.texts) for part in parts)
        try:
            # alone in its block: streamed, as best_spans streams
            if sum(len(text) for text in block[0]) > MAX_FILE_CHARS:
                parts.append(best_spans(model, queries, block[0], **options))
                continue
            keys = [cache.key(settings, file) for file in block] if cache is not None else []
            entries = [cache.load(key) for key in keys] if cache is not None else []
            for entry in entries:
                replay.memo.update(entry or {})
            block_texts = [text for file in block for text in file]
            # without a cache: the model itself, as best_spans
            searcher = replay if cache is not None else model
            found = best_spans(searcher, queries, block_texts, **options)  # type: ignore[arg-type]  # replays it
            parts.append(found)
        except WindowError as error:  # its text named among all texts
            errors = [(index + base, reason) for index, reason in error.errors]
            raise WindowError(error.text_index + base, error.reason, errors) from None
        for file, key, entry in zip(block, keys, entries):
            if cache is not None and entry is None:
                _save(replay, cache, key, _window_digests(model, file, config, prompt, context))
        replay.memo.clear()
    if cache is not None:
        cache.prune()
    return _joined(parts, texts)


def _save(replay: _Replay, cache: EncodingCache, key: str, digests: list[bytes]) -> None:
    """Write a file's entry from the windows it was searched with (none missing, else nothing is written)."""
    if digests and all(digest in replay.memo for digest in digests):
        cache.save(key, [(digest, replay.memo[digest]) for digest in dict.fromkeys(digests)])


def _window_digests(model, texts: list[str], config, prompt: str, context: int) -> list[bytes]:
    """The digests of a file's windows, planned as span encoding plans them (texts that cannot be cut have none)."""
    room = model_window(model) - (
        len(model.tokenizer(prompt, add_special_tokens=False)["input_ids"]) if prompt else 0
    )
    windows = plan_windows(
        model.tokenizer, texts, room, config.max_span, context, config.unit, errors=[]
    )
    return [window_digest(prompt, texts[w.text_index][w.char_start : w.char_end]) for w in windows]


def _blocks(files: list[list[str]]):
    """Consecutive files of about :data:`BLOCK_CHARS` characters; a file over :data:`MAX_FILE_CHARS` alone."""
    block: list[list[str]] = []
    size = 0
    for file in files:
        chars = sum(map(len, file))
        if chars > MAX_FILE_CHARS or size + chars > BLOCK_CHARS:
            if block:
                yield block
            block, size = [], 0
        block.append(file)
        size += chars
        if chars > MAX_FILE_CHARS:
            yield block
            block, size = [], 0
    if block:
        yield block


def _joined(parts: list[SpanSearchResult], texts: list[str]) -> SpanSearchResult:
    """One result over the texts of ``parts`` (searched in order), the spans per text padded to the widest."""
    if len(parts) == 1:
        return parts[0]
    width = max(part.scores.shape[2] for part in parts)
    names = ("scores", "starts", "ends", "unit_starts", "unit_ends", "similarities")

    def padded(values: np.ndarray) -> np.ndarray:
        fill = -np.inf if values.dtype.kind == "f" else -1
        return np.pad(values, ((0, 0), (0, 0), (0, width - values.shape[2])), constant_values=fill)

    arrays = {
        name: np.concatenate([padded(getattr(part, name)) for part in parts], axis=1)
        for name in names
    }
    skipped, base = [], 0
    for part in parts:
        skipped += [(index + base, reason) for index, reason in part.skipped]
        base += len(part.texts)
    first = parts[0]
    return SpanSearchResult(
        queries=first.queries,
        texts=texts,
        **arrays,
        similarity_fn_name=first.similarity_fn_name,
        scorer=first.scorer,
        skipped=skipped,
        calibrator=first.calibrator,
    )
