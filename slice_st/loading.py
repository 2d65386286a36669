"""Load, save and export models; the shipped default model, devices, model identity and fingerprint. A saved SLICE
checkpoint is a plain sentence-transformers pipeline (span settings in ``config.json``), loaded with no trust flag."""

from __future__ import annotations

import copy
import hashlib
import json
import os
import re
import shutil
import tempfile
import traceback
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import TYPE_CHECKING, Any

from slice_st._checks import check_device
from slice_st._extras import needs_extra
from slice_st.config import (
    check_tokenizer,
    get_span_config,
    hf_config,
    set_span_config,
    span_pooling_module,
)
from slice_st.errors import FileAccessError, ModelLoadError, SpanInputError
from slice_st.files import check_not_link, check_output
from slice_st.pretrained import (
    BASE_MODEL_NAMES,
    DEFAULT_MODEL_NAME,
    DEFAULT_SHIPPED_MODEL,
    default_model_path,
    is_shipped_model_name,
    rebuilt_model,
)

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

    from slice_st.encoder import SpanEncoder

__all__ = ["load_model", "save_slice_model", "export_model", "default_model_path"]

#: The module class of slice-st's own that a ``modules.json`` may name (``SpanPooling`` saved as a module).
OWN_MODULE_TYPE = "slice_st.models.span_pooling.SpanPooling"
EXPORT_RECORD = "slice_st_export.json"  # which model an export folder holds


def load_model(
    model_name_or_path: str | None = None,
    *,
    backend: str = "torch",
    model_file: str | None = None,
    quantized: bool | str = False,
    dtype: Any = None,
    threads: int | None = None,
    export_dir: str | None = None,
    **kwargs: Any,
) -> SpanEncoder:
    """Load a :class:`~slice_st.SpanEncoder` (a ``SentenceTransformer`` with span methods); with no name, the shipped
    SLICE model ``slice-minilm``.

    ``slice-minilm`` is the embedded all-MiniLM-L6-v2 with slice-st's SLICE adapter merged in (offline); ``"base"``
    (or ``"all-MiniLM-L6-v2"``, or its Hub id) the plain embedded model. With ``backend="onnx"|"openvino"`` the
    transformer runs from an exported file of the folder (:func:`export_model`; docs/guides/backends.md).

    Args:
        model_name_or_path: A Hub id, a local folder, ``"slice-minilm"`` or ``"base"`` (``None``: slice-minilm).
        backend: ``"torch"``, ``"onnx"`` (ONNX Runtime) or ``"openvino"``.
        model_file: Exported file inside the folder (``"onnx/model_qint8_avx512_vnni.onnx"``).
        quantized: Pick the int8 ONNX file (``True``, or a config name such as ``"avx2"``).
        dtype: ``"float16"``/``"bfloat16"`` torch weights (token vectors in half, span sums in float32), or
            OpenVINO's inference precision.
        threads: Intra-op threads (default: torch's own, or ``SLICE_ST_THREADS``).
        export_dir: With ONNX/OpenVINO: export there first if the folder has no export.
        **kwargs: Passed to ``SentenceTransformer`` (``device``, ``revision``, …).

    Returns:
        A :class:`~slice_st.SpanEncoder`.

    Raises:
        FileNotFoundError: A missing local path, or no exported file.
        ModelLoadError: A file, a folder with broken weights, config or tokenizer, a Hub id that cannot be fetched.
        SpanInputError: An unknown or absent ``device``, or options that do not fit; checked before loading.

    Example:
        >>> model_identity(load_model()), model_identity(load_model("base"))
        (('slice-minilm', ''), ('sentence-transformers/all-MiniLM-L6-v2', ''))
    """
    from slice_st import backends

    backends.check_backend(backend)
    if threads is not None:
        backends.check_parallelism(threads, "threads")
    torch_dtype = backends.resolve_dtype(dtype)
    check_revision(kwargs.get("revision"))
    if backend != "torch":
        options = (model_file, quantized, torch_dtype, threads, export_dir)
        return _load_exported(model_name_or_path, backend, *options, kwargs)
    if model_file or quantized:
        raise SpanInputError(
            "model_file/quantized select an exported file: give backend='onnx' or 'openvino'."
        )
    kwargs["device"] = check_device(kwargs.get("device"))
    if torch_dtype is not None:
        own = kwargs.get("model_kwargs") or {}
        kwargs["model_kwargs"] = backends.half_precision_kwargs(torch_dtype, kwargs["device"]) | own
    if threads:
        backends.set_torch_threads(threads)
    return _load_torch(model_name_or_path, kwargs)


def check_revision(revision: Any) -> None:
    """A ``SpanInputError`` unless ``revision`` is ``None`` or a Hub branch, tag or commit name: the Hub client keeps
    ``refs/REVISION`` in its cache, so ``../`` or an absolute path would write outside it."""
    if revision is None:
        return
    parts = revision.split("/") if isinstance(revision, str) else []
    if not parts or {"", ".", ".."} & set(parts) or re.search(r"[\\\0\s:]", revision):
        raise SpanInputError(
            f"revision {revision!r} is not a branch, tag or commit name of a Hub repository."
        )


def _load_torch(name: Any, kwargs: dict[str, Any]):
    """:func:`load_model` on torch: the shipped model, the embedded base, or a folder or Hub id."""
    from slice_st.card import describe_embedded_base, slice_card_data

    if name is None or is_shipped_model_name(name):
        return _load_shipped(name or DEFAULT_SHIPPED_MODEL, kwargs)
    embedded_base = name in BASE_MODEL_NAMES
    folder = _local_folder(default_model_path() if embedded_base else name)
    if folder is not None and not os.path.isdir(folder):
        raise ModelLoadError(f"{name} is a file, not a model folder (or a Hub id).")
    model = _sentence_transformer(folder or os.fspath(name), kwargs)
    # sentence-transformers' card until a trainer with a SLICE loss makes it a SLICE card
    slice_card_data(model)
    if embedded_base:
        describe_embedded_base(model)
    return model


def _load_shipped(name: str, kwargs: dict[str, Any]):
    """A model shipped in the package: its base (embedded, or from the Hub cache) with its adapter merged in."""
    from slice_st.card import describe_shipped_model
    from slice_st.encoder import SpanEncoder
    from slice_st.pretrained import load_shipped_model, shipped_model

    shipped = shipped_model(name)
    if shipped.base is None:
        try:
            with _no_weight_bar():
                base = SpanEncoder(default_model_path(), **kwargs)
        except ValueError as error:
            if raised_by_sentence_transformers(error):
                raise
            raise ModelLoadError(f"cannot load the shipped model {name}: {error}") from error
    else:
        try:
            base = _sentence_transformer(shipped.base_path(), kwargs)
        except (ModelLoadError, FileNotFoundError) as error:
            raise ModelLoadError(
                f"{shipped.name} is built on {shipped.base}, which cannot be loaded here: {error} Run once with "
                f"network access (the Hugging Face cache keeps it), or set {shipped.base_env} to a local copy."
            ) from error
    try:
        model = load_shipped_model(name, base)
    except ValueError as error:  # a damaged or unsupported adapter in the package
        raise ModelLoadError(f"cannot load the shipped model {name}: {error}") from error
    describe_shipped_model(model, name)
    return model


def _local_folder(name: Any) -> str | None:
    """``name`` as a local path if something is there (``None``: a Hub id); a missing path that looks local (``./x``,
    ``/x``, ``~/x``, ``a/b/c``) is a ``FileNotFoundError``."""
    if not isinstance(name, (str, os.PathLike)):
        raise ModelLoadError(f"A model is a Hub id or a folder path, got {type(name).__name__}.")
    name = os.fspath(name)
    local = os.path.expanduser(name)
    if os.path.exists(local):
        return local
    if name.startswith((".", "/", "~")) or name.count("/") > 1:
        raise FileNotFoundError(f"No model found at {name!r}.")
    return None


def _sentence_transformer(name: str, kwargs: dict[str, Any]):
    """``SentenceTransformer(name, **kwargs)``, no weights bar, tokenizer checked; failures: :class:`ModelLoadError`."""
    is_folder = os.path.isdir(name)
    try:
        with _no_weight_bar():
            model = _load_st(name, kwargs)
    except Exception as error:  # many loaders, many error types
        if raised_by_sentence_transformers(error):
            raise
        detail = (str(error).strip().splitlines() or [type(error).__name__])[0]
        if is_folder:
            message = f"Cannot load the model in {name}: {detail} ({type(error).__name__})."
        elif hub_offline():
            message = (
                f"Model {name!r} is not a local folder and not in the Hugging Face cache, and HF_HUB_OFFLINE is set, "
                "so it cannot be downloaded: give a local folder, or download it first."
            )
        else:
            problem = _hub_problem(error) or f"{detail} ({type(error).__name__})"
            message = f"Cannot load model {name!r} from the Hugging Face Hub: {problem}."
        raise ModelLoadError(message) from error
    check_tokenizer(model, name)
    return model


def raised_by_sentence_transformers(error: BaseException) -> bool:
    """Whether ``error`` is a ``ValueError``/``TypeError`` of sentence-transformers' own checks (an unknown
    ``default_prompt_name``, an argument it does not take): a SLICE model raises it unchanged, as plain
    ``SentenceTransformer(...)`` does, rather than as a :class:`ModelLoadError` (an ``OSError``)."""
    if not isinstance(error, (ValueError, TypeError)):
        return False
    frames = [frame for frame, _ in traceback.walk_tb(error.__traceback__)]
    module = frames[-1].f_globals.get("__name__", "") if frames else ""
    # A TypeError for a keyword SentenceTransformer does not take is raised at the call, in this module.
    return module.partition(".")[0] == "sentence_transformers" or (
        isinstance(error, TypeError) and module == __name__
    )


@contextmanager
def _no_weight_bar() -> Iterator[None]:
    """No "Loading weights" bar from transformers while a model loads."""
    from transformers.utils import logging as transformers_logging

    shown = transformers_logging.is_progress_bar_enabled()
    transformers_logging.disable_progress_bar()
    try:
        yield
    finally:
        if shown:
            transformers_logging.enable_progress_bar()


def _load_st(folder: str, kwargs: dict[str, Any]):
    """``SpanEncoder(folder)``; with ``SpanPooling`` as a module, no trust flag: through a temporary view (links
    to the files, nothing written in ``folder``) where that module is the equivalent mean ``Pooling``."""
    from sentence_transformers.sentence_transformer.modules import Pooling

    from slice_st.encoder import SpanEncoder

    try:
        entries = json.loads(Path(folder, "modules.json").read_text("utf-8"))
        types = [entry["type"] for entry in entries]
    except (OSError, ValueError, TypeError, KeyError):  # a Hub id, or not a folder of ours
        types = []
    plain = all(
        kind == OWN_MODULE_TYPE or kind.startswith("sentence_transformers.") for kind in types
    )
    # sentence-transformers' trust flag judges other folders
    if OWN_MODULE_TYPE not in types or not plain:
        return SpanEncoder(folder, **kwargs)
    folder = os.path.abspath(folder)
    own = [entry for entry in entries if entry["type"] == OWN_MODULE_TYPE]
    # the view writes this module's folder: one plain name, or it could land anywhere
    for entry in own:
        path = entry.get("path")
        if not isinstance(path, str) or path in ("", ".", "..") or re.search(r"[/\\\0:]", path):
            raise ModelLoadError(
                f"modules.json gives SpanPooling the module path {path!r}: it must be one folder name inside the "
                "model folder (such as '1_SpanPooling')."
            )
    settings = {}
    with tempfile.TemporaryDirectory(prefix="slice-st-view-") as view:
        for name in set(os.listdir(folder)) - {"modules.json"} - {entry["path"] for entry in own}:
            os.symlink(os.path.join(folder, name), os.path.join(view, name))
        for entry in own:
            config = json.loads(Path(folder, entry["path"], "config.json").read_text("utf-8"))
            settings = {
                key: config[key] for key in ("min_span", "max_span", "unit") if key in config
            }
            entry["type"] = f"{Pooling.__module__}.Pooling"
            module = os.path.join(view, entry["path"])
            os.makedirs(module)
            Pooling(int(config["embedding_dimension"]), "mean").save(module)
        Path(view, "modules.json").write_text(json.dumps(entries, indent=2), "utf-8")
        model = SpanEncoder(view, **kwargs)
    transformer_config = hf_config(model)
    if transformer_config is not None:
        # the model's identity is its folder, not the view
        transformer_config._name_or_path = folder
    set_span_config(model, **settings)
    return model


def _hub_problem(error: BaseException) -> str | None:
    """What a Hub download error means to a user, from ``huggingface_hub``'s error classes in the chain of causes."""
    endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co").rstrip("/")
    seen: list[BaseException] = []
    while error is not None and error not in seen and len(seen) < 20:
        seen.append(error)
        error = error.__cause__ or error.__context__
    names = {base.__name__ for item in seen for base in type(item).__mro__}
    if "GatedRepoError" in names:
        return "the repository is gated: accept its conditions on the Hub and set a token (HF_TOKEN or `hf auth login`)"
    if "RevisionNotFoundError" in names:
        return "the repository has no such revision (branch, tag or commit)"
    if "RepositoryNotFoundError" in names:
        return (
            f"no such repository on {endpoint}, or it is private and no token with access to it is set "
            "(HF_TOKEN or `hf auth login`)"
        )
    if {
        "ConnectError",
        "ConnectionError",
        "ConnectTimeout",
        "TimeoutException",
        "LocalEntryNotFoundError",
    } & names:
        return (
            f"the Hub at {endpoint} cannot be reached and the model is not in the local cache; check the network "
            "(or HF_ENDPOINT), or download the model once while online"
        )
    if "RemoteEntryNotFoundError" in names:
        return "the repository lacks a file the model needs (is it a sentence-transformers model?)"
    return None


def hub_offline() -> bool:
    """Whether the Hugging Face Hub is switched off (``HF_HUB_OFFLINE=1``)."""
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def require_backend(backend: str, export: bool = False) -> None:
    """A ``MissingExtraError`` naming the extra unless ``backend`` (with ``export``: its exporter) is installed."""
    # torch.onnx's exporter needs onnx and onnxscript; the int8 quantizer is ONNX Runtime's
    if export:
        with needs_extra("onnx", "Exporting to ONNX"):
            import onnx  # noqa: F401
            import onnxruntime  # noqa: F401
            import onnxscript  # noqa: F401
    if backend == "onnx":
        with needs_extra("onnx", "The ONNX backend"):
            import onnxruntime  # noqa: F401
    elif backend == "openvino":
        with needs_extra("openvino", "The OpenVINO backend"):
            import openvino  # noqa: F401


def _load_exported(
    name, backend: str, model_file, quantized, torch_dtype, threads, export_dir, kwargs: dict
):
    """:func:`load_model` for ONNX Runtime / OpenVINO: the folder's pipeline, its transformer run from the export."""
    import torch

    from slice_st.backends import attach_runtime, model_file_for

    require_backend(backend)
    if quantized and backend != "onnx":
        raise SpanInputError(
            f"quantized=True (--quantized) picks an int8 ONNX file: use backend='onnx' (--backend onnx) with it; "
            f"for {backend} give model_file=... (--model-file FILE) instead."
        )
    if export_dir is not None and os.path.exists(export_dir) and not os.path.isdir(export_dir):
        raise FileAccessError(f"export_dir {os.fspath(export_dir)} is a file, not a folder.")
    device = check_device(kwargs.pop("device", None))
    if device not in (None, "cpu"):
        raise SpanInputError(f"backend={backend!r} runs on the CPU here; got device={device!r}.")
    if torch_dtype not in (None, torch.float32) and backend != "openvino":
        raise SpanInputError(
            "dtype applies to torch and OpenVINO; an ONNX model runs as exported (use quantized=...)."
        )
    folder = _local_folder(name) if name is not None and not is_shipped_model_name(name) else None
    # else only an export of it can be loaded
    folder = folder if folder and os.path.isdir(folder) else None
    found = model_file_for(folder, backend, model_file, quantized) if folder else None
    if found is None:
        if model_file and folder:
            raise FileNotFoundError(f"No exported file {model_file!r} in {folder!r}.")
        if export_dir is None:
            kind = "ONNX" if backend == "onnx" else "OpenVINO"
            what = "int8 ONNX file" if quantized else f"{kind} export"
            option, flag = (", quantize=True", " --quantize") if quantized else ("", "")
            raise FileNotFoundError(
                f"{'The default model' if name is None else repr(name)} has no {what}. Make one (offline) with "
                f"slice_st.export_model({name!r}, DIR, backend={backend!r}{option}) or `slice-st export "
                f"{'' if name is None else f'{name} '}-o DIR --backend {backend}{flag}`, then load DIR; or pass "
                "export_dir=DIR (--export-dir) to do both."
            )
        found = export_model(name, export_dir, backend=backend, quantize=quantized or None)
        folder = os.fspath(export_dir)
    model = _sentence_transformer(folder, {"device": "cpu", **kwargs})
    try:
        return attach_runtime(model, backend, found, threads=threads, dtype=torch_dtype)
    # onnxruntime / openvino raise their own types for a damaged or foreign file
    except Exception as error:
        message = " ".join(str(error).split())[:300] or type(error).__name__
        raise ModelLoadError(
            f"cannot load {found} with {backend}: not a valid (or a truncated) {backend} model file ({message})."
        ) from error


def export_model(
    model: Any = None,
    output_dir: str | None = None,
    backend: str = "onnx",
    quantize: bool | str | None = None,
    overwrite: bool = False,
) -> str:
    """Export a model for ONNX Runtime or OpenVINO into ``output_dir``, offline; returns the exported file.

    ``output_dir`` receives the sentence-transformers model and beside it ``onnx/model.onnx`` (with ``quantize`` the
    int8 ``onnx/model_qint8_<config>.onnx``; for OpenVINO ``openvino/openvino_model.xml``), reused unless
    ``overwrite``; a folder holding another model's export is refused. Needs ``slice-st[onnx]`` (and ``[openvino]``).

    Args:
        model: A loaded torch ``SentenceTransformer``, or what :func:`load_model` takes (``None``: the default model).
        output_dir: Folder of the export (required).
        backend: ``"onnx"`` or ``"openvino"``.
        quantize: ``True`` (this CPU's int8 setting) or a config name (``"avx2"``, ``"arm64"``, …); ONNX only.
        overwrite: Export again even if the file exists.

    Returns:
        The path of the exported file.

    Raises:
        SpanInputError: Options that do not fit, or a folder holding another model's export.
        FileAccessError: A failed write (nothing half-written is kept).
    """
    from slice_st import backends

    backends.check_backend(backend)
    if output_dir is None:
        raise SpanInputError(
            "export_model needs output_dir: the folder that keeps the exported model."
        )
    if backend == "torch":
        raise SpanInputError(
            "backend='torch' needs no export: save the model with model.save(path)."
        )
    if quantize and backend != "onnx":
        raise SpanInputError(
            "quantize applies to ONNX exports (dynamic int8); OpenVINO runs the float export."
        )
    config = backends.cpu_quantization_config() if quantize is True else quantize or None
    if config is not None and config not in backends.QUANTIZATION_CONFIGS:
        raise SpanInputError(
            f"quantize must be True or one of {', '.join(backends.QUANTIZATION_CONFIGS)}, got {quantize!r}."
        )
    # a file, or under one, or not writable: refused before any work
    output = Path(check_output(output_dir))
    try:  # an export folder that holds another model is never reused: its stale files would answer for it
        held = json.loads((output / EXPORT_RECORD).read_text(encoding="utf-8")).get("source") or ""
    except (OSError, ValueError, AttributeError):  # no record, or not one slice-st wrote
        held = ""
    wanted = _export_source(model) if held and not overwrite else ""
    # not the export folder itself
    if wanted and held != wanted and wanted != os.path.realpath(output):
        raise SpanInputError(
            f"{output} holds an export of {held!r}, not of {wanted!r}: choose another folder, or pass overwrite=True "
            "(--overwrite) to replace it."
        )
    target = output / (
        f"onnx/model_qint8_{config}.onnx" if config else backends.DEFAULT_FILES[backend]
    )
    if target.is_file() and not overwrite:
        return str(target)
    require_backend(backend, export=True)
    return _write_export(model, output, target, backend, config, overwrite)


def _write_export(
    model: Any, output: Path, target: Path, backend: str, config: str | None, overwrite: bool
) -> str:
    """Write what is missing of the export (all with ``overwrite``); a failed write leaves nothing half-done."""
    from slice_st import backends

    onnx_file = output / backends.DEFAULT_FILES["onnx"]
    fresh = overwrite or not onnx_file.is_file()
    # a name: load it (or an earlier export's copy)
    if fresh and isinstance(model, (str, os.PathLike, type(None))):
        saved = (output / "modules.json").is_file() and not overwrite
        model = load_model(str(output) if saved else model, device="cpu")
    elif fresh and backends.backend_of(model) != "torch":  # a loaded model
        raise SpanInputError("Exporting needs the model loaded on the torch backend.")
    writing: list[Path] = []  # removed if the write fails (the whole folder if created here)
    with _undo_failed_write(
        "export the model to", output, writing, " (nothing half-written was kept)"
    ):
        if fresh:
            if overwrite or not (output / "modules.json").is_file():
                writing += [output / "modules.json", output / EXPORT_RECORD]
                output.mkdir(parents=True, exist_ok=True)
                model.save(str(output))
                _usual_permissions(str(output))
                (output / EXPORT_RECORD).write_text(
                    json.dumps({"source": _export_source(model)}) + "\n"
                )
            writing.append(onnx_file)
            backends.export_onnx(model, onnx_file)
        writing.append(target)
        if backend == "openvino":
            return str(backends.export_openvino(onnx_file, target))
        if config:
            return str(backends.quantize_onnx(onnx_file, target, config))
        return str(onnx_file)


def _export_source(model: Any) -> str:
    """A comparable name for what is exported: a shipped name, a Hub id or an absolute folder."""
    if model is None:
        return DEFAULT_SHIPPED_MODEL
    if isinstance(model, (str, os.PathLike)):
        name = os.fspath(model)
        if is_shipped_model_name(name):
            return name.removeprefix("slice-st/")
        local = os.path.expanduser(default_model_path() if name in BASE_MODEL_NAMES else name)
        return os.path.realpath(local) if os.path.exists(local) else name
    card = getattr(model, "model_card_data", None)
    model_id = getattr(card, "model_id", None) or getattr(card, "shipped_name", None)
    if model_id:
        return str(model_id)
    name = str(getattr(hf_config(model), "_name_or_path", "") or "")
    return os.path.realpath(name) if name and os.path.exists(name) else name


def save_slice_model(
    model: SentenceTransformer, path: str, *, overwrite: bool = False, **save_kwargs: Any
) -> str:
    """Save ``model`` as a checkpoint that plain ``SentenceTransformer(path)`` loads, no trust flag needed.

    LoRA adapters are merged first, the span settings go into the transformer's ``config.json``, and a ``SpanPooling``
    module is written as the equivalent mean ``Pooling``.

    Args:
        model: The ``SentenceTransformer`` to save.
        path: Output folder: new, or empty (one with files only with ``overwrite``), never a symbolic link.
        overwrite: Replace the checkpoint's own files in a folder that already holds some.
        **save_kwargs: Passed to ``model.save``.

    Returns:
        ``path``.

    Raises:
        FileAccessError: ``path`` is a link, a file, unwritable, or holds files (without ``overwrite``); or the write
            failed (nothing half-written is kept in a new or empty folder).
    """
    from sentence_transformers.sentence_transformer.modules import Pooling

    full = "its README.md, config.json… would be replaced; name a new or empty folder, or pass overwrite=True."
    try:
        path = check_output(
            check_not_link(path, purpose="to save it into"), full="" if overwrite else full
        )
    except FileAccessError as error:  # nothing is written through a link
        raise FileAccessError(f"cannot save a model: {error}") from None
    # A failed write removes all that a new or empty folder holds (nothing of the user's), in another folder nothing.
    with _undo_failed_write(
        "save a model to", path, [] if os.path.isdir(path) and os.listdir(path) else None
    ):
        settings = get_span_config(model)
        model = saved = merged_adapters(model)
        pooling = span_pooling_module(model)
        # SpanPooling as a module
        if pooling is not None and any(module is pooling for module in model):
            mean = Pooling(pooling.embedding_dimension, "mean")
            modules = [mean if module is pooling else module for module in model]
            # the same (SLICE) card
            saved = rebuilt_model(model, modules, model_card_data=model.model_card_data)
        set_span_config(saved, settings.min_span, settings.max_span, settings.unit)
        saved.save(path, **save_kwargs)
        _usual_permissions(path)
        if saved is not model:  # the card back to the model it describes
            model.model_card_data.register_model(model)
    return path


@contextmanager
def _undo_failed_write(what: str, path: Any, files: list | None, note: str = "") -> Iterator[None]:
    """An I/O error (``OSError``, ``SafetensorError``) writing ``path``: remove the folder if created here, else
    ``files`` (``None``: all the folder, empty before, holds; links as links), then a :class:`FileAccessError`."""
    created = not os.path.lexists(path)
    try:
        yield
    except Exception as error:
        if not (isinstance(error, OSError) or type(error).__name__ == "SafetensorError"):
            raise
        if not created and files is None and os.path.isdir(path) and not os.path.islink(path):
            files = [entry.path for entry in os.scandir(path)]
        for file in [path] if created else files or []:
            if os.path.isdir(file) and not os.path.islink(file):
                shutil.rmtree(file, ignore_errors=True)
            elif os.path.lexists(file):
                with suppress(OSError):
                    os.unlink(file)
        if isinstance(error, FileAccessError):
            raise
        detail = (
            error.strerror
            if isinstance(error, OSError) and error.strerror
            else " ".join(str(error).split())
        )
        where = f" ({error.filename})" if isinstance(error, OSError) and error.filename else ""
        raise FileAccessError(f"cannot {what} {path}: {detail}{where}{note}.") from error


def _usual_permissions(path: str) -> None:
    """Give the ``.safetensors`` files just saved in ``path`` the usual permissions (their writer makes them 0600)."""
    mask = os.umask(0)
    os.umask(mask)
    for file in Path(path).rglob("*.safetensors"):  # links to folders are not entered
        if file.is_file() and not file.is_symlink():
            file.chmod(0o666 & ~mask)


def has_adapters(model: SentenceTransformer) -> bool:
    """True when a PEFT adapter (e.g. LoRA from ``model.add_adapter``) is attached to the model's transformer."""
    return any(
        getattr(getattr(module, "auto_model", None), "_hf_peft_config_loaded", False)
        for module in model
    )


def merged_adapters(model: SentenceTransformer) -> SentenceTransformer:
    """``model`` itself if it has no adapter, else a copy with its LoRA adapters merged into plain weights."""
    if not has_adapters(model):
        return model
    with needs_extra("train", "merging LoRA adapters"):
        from peft.tuners.tuners_utils import BaseTunerLayer
    clone = copy.deepcopy(model)
    module = next(module for module in clone if getattr(module, "auto_model", None) is not None)
    auto_model = module.auto_model
    for name, layer in list(auto_model.named_modules()):
        if isinstance(layer, BaseTunerLayer):
            layer.merge(safe_merge=True)
            parent_name, _, child = name.rpartition(".")
            setattr(auto_model.get_submodule(parent_name), child, layer.get_base_layer())
    # A fresh instance: loading an adapter leaves key-renaming state that would prefix every key on save.
    module.model = type(auto_model)(auto_model.config).to(auto_model.device, auto_model.dtype)
    module.model.load_state_dict(auto_model.state_dict())
    module.model.train(auto_model.training)
    return clone


def model_fingerprint(model: SentenceTransformer) -> str:
    """A short hash of the model's weights and tokenizer, what identifies a model for an index: SHA-256 over every
    tensor (name, shape, dtype, bytes); on ONNX Runtime or OpenVINO over its backend and exported file."""
    import torch

    from slice_st.backends import backend_of, weight_files

    digest = hashlib.sha256()
    tokenizer = model.tokenizer
    digest.update(
        f"{type(tokenizer).__name__}:{len(tokenizer) if tokenizer is not None else 0}".encode()
    )
    backend = backend_of(model)
    if backend != "torch":
        digest.update(f"{backend}{getattr(hf_config(model), 'hidden_size', '')}".encode())
        for file in weight_files(model):
            with open(file, "rb") as handle:
                for block in iter(lambda: handle.read(1 << 20), b""):
                    digest.update(block)
    else:
        # name, shape, dtype and raw bytes (bfloat16 too)
        for name, tensor in model.state_dict().items():
            digest.update(f"{name}|{tuple(tensor.shape)}|{tensor.dtype}".encode())
            digest.update(tensor.detach().reshape(-1).contiguous().cpu().view(torch.uint8).numpy())
    return digest.hexdigest()[:16]


def model_identity(model: SentenceTransformer) -> tuple[str, str]:
    """``(name, path)`` of a model: its Hub id, shipped name or folder name (with the parent's for generic names such
    as ``final``), and the local folder it was loaded from (``""`` if none; :func:`load_model` shows both)."""
    card = getattr(model, "model_card_data", None)
    names = (getattr(card, key, None) for key in ("model_id", "shipped_name", "base_model"))
    hub_id = next(filter(None, names), "")
    # reopened by its name, wherever its base is cached
    if hub_id and hub_id == getattr(card, "shipped_name", None):
        return hub_id, ""
    try:
        config = hf_config(model)
    except TypeError:  # not a module list
        config = None
    source = str(getattr(config, "name_or_path", "") or "")
    if not source or not os.path.isdir(source):
        return (hub_id or source), ""
    path = os.path.abspath(source)
    # the transformer inside an ST folder (0_Transformer)
    if re.fullmatch(r"\d+_\w+", os.path.basename(path)):
        path = os.path.dirname(path)
    with suppress(OSError):
        # the embedded base, or a shipped model built on it
        if os.path.samefile(path, default_model_path()):
            return hub_id or DEFAULT_MODEL_NAME, ""
    name = os.path.basename(path)
    if re.fullmatch(r"(model|final|best|last|output|checkpoint(-\d+)?)", name, flags=re.IGNORECASE):
        name = f"{os.path.basename(os.path.dirname(path))}/{name}"
    return hub_id or name, path
