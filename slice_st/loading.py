"""Loading, saving and exporting models; the embedded default model, devices, fingerprints.

Span settings are :mod:`slice_st.config`.

A SLICE checkpoint is a plain sentence-transformers pipeline (``Transformer`` → ``Pooling(mean)``
→ optional ``Normalize``), so ``SentenceTransformer(path)`` loads it with no trust flag and its
mean-pooled sentence embeddings work anywhere (mteb included). Its span settings travel inside the
transformer's own ``config.json`` under the key ``slice_st`` (Hugging Face configs keep extra
attributes through ``save_pretrained``/``from_pretrained`` and Hub pushes). :class:`~slice_st.SpanPooling`
attached to a model leaves these modules as they are, so ``save()`` / ``push_to_hub()`` write the same plain
checkpoint; :func:`load_model` also opens the folders slice-st once saved with ``SpanPooling`` as a module.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from slice_st.config import get_span_config, hf_config, set_span_config, span_pooling_module
from slice_st.errors import FileAccessError, ModelLoadError, SpanInputError
from slice_st.pretrained import (
    BASE_MODEL_NAMES,
    DEFAULT_MODEL_NAME,
    DEFAULT_SHIPPED_MODEL,
    default_model_path,
    rebuilt_model,
)
from slice_st.text import require

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

__all__ = [
    "load_model",
    "save_slice_model",
    "export_model",
    "default_model_path",
]


def check_device(device: Any) -> str | None:
    """``device`` as a string if this machine has it (``None`` stays ``None``), else a clear ``SpanInputError``.

    >>> check_device("cpu")
    'cpu'
    >>> check_device("banana")
    Traceback (most recent call last):
    ...
    slice_st.errors.SpanInputError: Unknown device 'banana' (expected e.g. 'cpu', 'cuda:0').
    """
    if device is None:
        return None
    import torch

    if not isinstance(device, (str, torch.device)) or (isinstance(device, str) and not device.strip()):
        raise SpanInputError(f"A device is a name such as 'cpu' or 'cuda:0', got {device!r}.")
    try:
        parsed = torch.device(device)
    except (RuntimeError, ValueError):
        raise SpanInputError(f"Unknown device {str(device)!r} (expected e.g. 'cpu', 'cuda:0').") from None
    if parsed.type == "cuda":
        if not torch.cuda.is_available():
            raise SpanInputError(f"Device {str(device)!r} was asked for, but CUDA is not available here.")
        if (parsed.index or 0) >= torch.cuda.device_count():
            raise SpanInputError(
                f"Device {str(device)!r} does not exist: {torch.cuda.device_count()} CUDA device(s) here."
            )
    elif parsed.type == "mps":
        if not torch.backends.mps.is_available():
            raise SpanInputError(f"Device {str(device)!r} was asked for, but MPS is not available here.")
    elif parsed.type != "cpu" and not hasattr(torch, parsed.type):
        raise SpanInputError(f"Unsupported device {str(device)!r}.")
    return str(device)


def check_tokenizer(model, name: str = "") -> None:
    """Refuse a model whose tokenizer cannot be its own: none, or far fewer tokens than the model's embeddings.

    A folder without ``tokenizer.json`` and ``vocab.txt`` still loads in ``transformers``, with a
    tokenizer of only the special tokens; every word then maps to ``[UNK]`` and results are silently
    wrong. ``ModelLoadError`` instead.
    """
    tokenizer = getattr(model, "tokenizer", None)
    where = f" ({name})" if name else ""
    if tokenizer is None:
        raise ModelLoadError(f"The model{where} has no tokenizer.")
    config = hf_config(model)
    vocab_size = getattr(config, "vocab_size", None) if config is not None else None
    size = len(tokenizer)
    if isinstance(vocab_size, int) and vocab_size > 0 and size * 2 < vocab_size:
        raise ModelLoadError(
            f"The model's tokenizer{where} has {size} tokens but the model has {vocab_size} token embeddings: "
            "its vocabulary files (tokenizer.json, vocab.txt, …) are missing or wrong."
        )


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
):
    """Load a ``SentenceTransformer``; with no name, the shipped SLICE model ``slice-minilm`` (offline).

    * ``None`` or ``"slice-minilm"``: the embedded all-MiniLM-L6-v2 with slice-st's SLICE adapter merged
      into its weights (see :mod:`slice_st.pretrained`; an ordinary ``SentenceTransformer``).
    * ``"base"``, ``"all-MiniLM-L6-v2"`` or ``"sentence-transformers/all-MiniLM-L6-v2"``: the plain
      embedded base model, as published.
    * Any other Hub id or local path, as ``SentenceTransformer`` loads it; keyword arguments go to
      ``SentenceTransformer``.

    Where the forward pass runs (README, "Faster inference"):

    * ``backend``: ``"torch"`` (default), ``"onnx"`` (ONNX Runtime) or ``"openvino"``: the transformer
      runs from an exported file of the model folder (``onnx/model.onnx``, ``openvino/openvino_model.xml``;
      see :mod:`slice_st.backends` and :func:`export_model`). With ``export_dir`` a missing export is
      made there once (offline) and the model loaded from there.
    * ``model_file``: which exported file, relative to the folder (``"onnx/model_qint8_avx512_vnni.onnx"``);
      ``quantized=True`` picks the int8 ONNX file (or a config name: ``"avx2"``, …).
    * ``dtype``: ``"float16"``/``"bfloat16"`` loads the torch weights in half precision (GPUs; bf16 also
      on CPUs with AMX / AVX512-BF16): token vectors in half, span sums still float32. On OpenVINO it
      sets the inference precision.
    * ``threads``: intra-op threads of ONNX Runtime / OpenVINO (default
      :func:`slice_st.backends.default_threads`); on torch, ``torch.set_num_threads(threads)``.

    A missing local path gives a ``FileNotFoundError``; a file, a folder with missing or broken weights, config
    or tokenizer, or a Hub id that cannot be fetched (offline) a :class:`ModelLoadError`; an unknown or absent
    ``device`` a ``ValueError``, all before anything is loaded where that can be known.

    Args:
        model_name_or_path: A Hub id, a local folder, ``"slice-minilm"`` or ``"base"`` (``None``: the shipped
            slice-minilm).
        backend: ``"torch"``, ``"onnx"`` or ``"openvino"``.
        model_file: Exported file inside the folder (ONNX/OpenVINO).
        quantized: Pick the int8 ONNX file (or a config name).
        dtype: ``"float16"``/``"bfloat16"`` weights, or OpenVINO's precision.
        threads: Intra-op threads (default: torch's own, or ``SLICE_ST_THREADS``).
        export_dir: With ONNX/OpenVINO: export there first if needed.
        **kwargs: Passed to ``SentenceTransformer`` (``device``, ``revision``, …).

    Returns:
        A ``SentenceTransformer`` with span features switched on.

    Example:
        >>> model_identity(load_model())[0], model_identity(load_model("base"))[0]
        ('slice-minilm', 'sentence-transformers/all-MiniLM-L6-v2')
    """
    import os

    from sentence_transformers import SentenceTransformer

    from slice_st.backends import check_backend, check_parallelism, resolve_dtype
    from slice_st.card import describe_embedded_base, describe_shipped_model
    from slice_st.pretrained import is_shipped_model_name, load_shipped_model

    check_backend(backend)
    if threads is not None:
        check_parallelism(threads, "threads")
    torch_dtype = resolve_dtype(dtype)
    if backend != "torch":
        return _load_exported(
            model_name_or_path, backend, model_file, quantized, torch_dtype, threads, export_dir, kwargs
        )
    if model_file or quantized:
        raise SpanInputError("model_file/quantized select an exported file: give backend='onnx' or 'openvino'.")
    if torch_dtype is not None:
        kwargs["model_kwargs"] = {"dtype": torch_dtype, **(kwargs.get("model_kwargs") or {})}
    if threads:
        import torch

        torch.set_num_threads(int(threads))
    kwargs["device"] = check_device(kwargs.get("device"))
    if model_name_or_path is None or is_shipped_model_name(model_name_or_path):
        name = model_name_or_path or DEFAULT_SHIPPED_MODEL
        try:
            with _no_weight_bar():
                model = load_shipped_model(name, default_model_path(), **kwargs)
        except ValueError as error:  # a damaged or unsupported adapter in the package
            raise ModelLoadError(f"cannot load the shipped model {name}: {error}") from error
        describe_shipped_model(model, name)
        return model
    embedded_base = model_name_or_path in BASE_MODEL_NAMES
    if embedded_base:
        model_name_or_path = default_model_path()
    if not isinstance(model_name_or_path, (str, os.PathLike)):
        raise ModelLoadError(f"A model is a Hub id or a folder path, got {type(model_name_or_path).__name__}.")
    model_name_or_path = os.fspath(model_name_or_path)
    local = os.path.expanduser(model_name_or_path)
    looks_local = model_name_or_path.startswith((".", "/", "~")) or model_name_or_path.count("/") > 1
    if looks_local and not os.path.exists(local):
        raise FileNotFoundError(f"No model found at {model_name_or_path!r}.")
    if os.path.exists(local) and not os.path.isdir(local):
        raise ModelLoadError(f"{model_name_or_path} is a file, not a model folder (or a Hub id).")
    own_modules = _own_module_entries(local) if os.path.isdir(local) else []
    try:
        with _no_weight_bar():
            if own_modules:
                model = _load_with_own_modules(local, own_modules, kwargs)
            else:
                model = SentenceTransformer(model_name_or_path, **kwargs)
    except Exception as error:  # many loaders, many error types: one clear message, the cause chained
        raise ModelLoadError(_load_failure(model_name_or_path, os.path.isdir(local), error)) from error
    check_tokenizer(model, model_name_or_path)
    if embedded_base:
        describe_embedded_base(model)
    return model


#: The module classes slice-st itself has written into a ``modules.json`` (a pipeline with ``SpanPooling`` as a
#: module, under its current and its former path): trusted by name, nothing else.
OWN_MODULE_TYPES = ("slice_st.models.span_pooling.SpanPooling", "slice_st.pooling.SpanPooling")


def _own_module_entries(folder: str) -> list[dict[str, Any]]:
    """The ``modules.json`` entries of ``folder`` that name slice-st's own module classes, when every other entry is
    sentence-transformers' own ([] otherwise: that folder is for sentence-transformers, and its trust flag, to judge).
    """
    import json
    import os

    try:
        with open(os.path.join(folder, "modules.json"), encoding="utf-8") as handle:
            entries = json.load(handle)
        types = [entry["type"] for entry in entries]
    except (OSError, ValueError, TypeError, KeyError):
        return []
    own = [entry for entry in entries if entry["type"] in OWN_MODULE_TYPES]
    others_plain = all(kind in OWN_MODULE_TYPES or kind.startswith("sentence_transformers.") for kind in types)
    return own if own and others_plain else []


def _load_with_own_modules(folder: str, own: list[dict[str, Any]], kwargs: dict[str, Any]):
    """Load a folder whose pipeline has slice-st's ``SpanPooling`` as a module (as slice-st once saved them) with no
    trust flag: through a temporary view of the folder (links to its files) where that module is the equivalent mean
    ``Pooling``; its span settings are recorded as a plain SLICE checkpoint records them. Nothing in ``folder`` is
    written; attach ``SpanPooling`` again where spans are needed inside the forward pass."""
    import json
    import os
    import tempfile

    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Pooling

    folder = os.path.abspath(folder)
    with open(os.path.join(folder, "modules.json"), encoding="utf-8") as handle:
        entries = json.load(handle)
    replaced = {entry["path"] for entry in own}
    settings = {}
    with tempfile.TemporaryDirectory(prefix="slice-st-view-") as view:
        for name in os.listdir(folder):
            if name != "modules.json" and name not in replaced:
                os.symlink(os.path.join(folder, name), os.path.join(view, name))
        for entry in entries:
            if entry["type"] not in OWN_MODULE_TYPES:
                continue
            with open(os.path.join(folder, os.path.basename(entry["path"]), "config.json"), encoding="utf-8") as handle:
                config = json.load(handle)
            settings = {key: config[key] for key in ("min_span", "max_span", "unit") if key in config}
            entry["type"] = f"{Pooling.__module__}.Pooling"
            os.makedirs(os.path.join(view, entry["path"]))
            Pooling(int(config["embedding_dimension"]), "mean").save(os.path.join(view, entry["path"]))
        with open(os.path.join(view, "modules.json"), "w", encoding="utf-8") as handle:
            json.dump(entries, handle, indent=2)
        model = SentenceTransformer(view, **kwargs)
    transformer_config = hf_config(model)
    if transformer_config is not None:
        transformer_config._name_or_path = folder  # the model's identity is its folder, not the view
    set_span_config(model, **settings)
    return model


@contextmanager
def _no_weight_bar():
    """transformers draws a "Loading weights" bar on every model load: noise for a load of a few seconds, in a
    script or a command. Off while the model loads (transformers' public switch), then as it was."""
    from transformers.utils import logging as transformers_logging

    shown = transformers_logging.is_progress_bar_enabled()
    transformers_logging.disable_progress_bar()
    try:
        yield
    finally:
        if shown:
            transformers_logging.enable_progress_bar()


def require_backend(backend: str, export: bool = False) -> None:
    """Check that the optional packages for ``backend`` (and for exporting, with ``export``) are installed;
    else :class:`slice_st.errors.MissingExtraError` naming ``slice-st[onnx]`` / ``slice-st[openvino]``."""
    if export:  # torch.onnx's exporter needs onnx and onnxscript; the int8 quantizer is ONNX Runtime's
        require("onnxruntime", "onnx", "Exporting to ONNX")
        require("onnx", "onnx", "Exporting to ONNX")
        require("onnxscript", "onnx", "Exporting to ONNX")
    if backend == "onnx":
        require("onnxruntime", "onnx", "The ONNX backend")
    elif backend == "openvino":
        require("openvino", "openvino", "The OpenVINO backend")


def _load_exported(name, backend: str, model_file, quantized, torch_dtype, threads, export_dir, kwargs: dict[str, Any]):
    """:func:`load_model` for ONNX Runtime / OpenVINO: the model folder's pipeline, its transformer run from the
    exported file."""
    import os

    import torch
    from sentence_transformers import SentenceTransformer

    from slice_st.backends import attach_runtime, model_file_for

    require_backend(backend)
    if quantized and backend != "onnx":
        raise SpanInputError(
            f"quantized=True (--quantized) picks an int8 ONNX file: use backend='onnx' (--backend onnx) with it; "
            f"for {backend} give model_file=... (--model-file FILE) instead."
        )
    if export_dir is not None and os.path.exists(export_dir) and not os.path.isdir(export_dir):
        raise FileAccessError(
            f"export_dir {os.fspath(export_dir)} is a file, not a folder: give a folder to export into."
        )
    device = check_device(kwargs.pop("device", None))
    if device is not None and device != "cpu":
        raise SpanInputError(f"backend={backend!r} runs on the CPU here; got device={device!r}.")
    if torch_dtype is not None and torch_dtype != torch.float32 and backend != "openvino":
        raise SpanInputError(
            "dtype applies to the torch and OpenVINO backends; an ONNX model runs as exported (use quantized=...)."
        )
    folder = os.path.expanduser(os.fspath(name)) if isinstance(name, (str, os.PathLike)) else None
    if folder is not None and not os.path.isdir(folder):
        if folder.startswith((".", "/", "~")) and not os.path.exists(folder):
            raise FileNotFoundError(f"No model found at {name!r}.")
        folder = None  # a shipped name or Hub id: only its export can be loaded
    found = model_file_for(folder, backend, model_file, quantized) if folder else None
    if found is None:
        if model_file and folder:
            raise FileNotFoundError(f"No exported file {model_file!r} in {folder!r}.")
        if export_dir is None:
            what = "int8 ONNX file" if quantized else {"onnx": "ONNX export", "openvino": "OpenVINO export"}[backend]
            quantize = ", quantize=True" if quantized else ""
            raise FileNotFoundError(
                f"{'The default model' if name is None else repr(name)} has no {what}. Make one (offline) with "
                f"slice_st.export_model({name!r}, DIR, backend={backend!r}{quantize}) or `slice-st export "
                f"{'' if name is None else str(name) + ' '}-o DIR --backend "
                f"{backend}{' --quantize' if quantized else ''}`, "
                "then load DIR; or pass export_dir=DIR (--export-dir) to do both."
            )
        found = export_model(name, export_dir, backend=backend, quantize=quantized or None)
        folder = os.fspath(export_dir)
    runner_kwargs = {}
    if backend == "openvino" and torch_dtype is not None:
        runner_kwargs["precision"] = {"float32": "f32", "float16": "f16", "bfloat16": "bf16"}[
            str(torch_dtype).removeprefix("torch.")
        ]
    try:
        with _no_weight_bar():
            model = SentenceTransformer(folder, device="cpu", **kwargs)
    except Exception as error:  # one clear message, the cause chained (as load_model)
        raise ModelLoadError(_load_failure(folder, True, error)) from error
    check_tokenizer(model, folder)
    try:
        return attach_runtime(model, backend, found, threads=threads, **runner_kwargs)
    except Exception as error:  # onnxruntime / openvino raise their own types for a damaged or foreign file
        message = " ".join(str(error).split())[:300] or type(error).__name__
        raise ModelLoadError(
            f"cannot load {found} with {backend}: not a valid (or a truncated) {backend} model file ({message})."
        ) from error


EXPORT_RECORD = "slice_st_export.json"  # which model an export folder holds


def _export_source(model: Any) -> str:
    """A comparable name for what :func:`export_model` exports: a shipped name, a Hub id or an absolute folder."""
    import os

    from slice_st.pretrained import is_shipped_model_name

    if model is None:
        return DEFAULT_SHIPPED_MODEL
    if isinstance(model, (str, os.PathLike)):
        name = os.fspath(model)
        if is_shipped_model_name(name):
            return name.removeprefix("slice-st/")
        if name in BASE_MODEL_NAMES:
            name = default_model_path()
        local = os.path.expanduser(name)
        return os.path.realpath(local) if os.path.exists(local) else name
    card = getattr(model, "model_card_data", None)
    model_id = getattr(card, "model_id", None) or getattr(card, "shipped_name", None)
    if model_id:
        return str(model_id)
    config = hf_config(model)
    name = str(getattr(config, "_name_or_path", "") or "") if config is not None else ""
    return os.path.realpath(name) if name and os.path.exists(name) else name


def _check_export_source(model: Any, output) -> None:
    """Refuse to reuse an export folder that holds another model (a stale cache would silently answer for it)."""
    import json
    import os

    record = output / EXPORT_RECORD
    if not record.is_file() or (
        isinstance(model, (str, os.PathLike))
        and os.path.realpath(os.path.expanduser(os.fspath(model))) == os.path.realpath(output)
    ):
        return
    try:
        held = json.loads(record.read_text(encoding="utf-8")).get("source") or ""
    except (OSError, ValueError, AttributeError):
        return
    wanted = _export_source(model)
    if held and wanted and held != wanted:
        raise SpanInputError(
            f"{output} holds an export of {held!r}, not of {wanted!r}: choose another folder, or pass overwrite=True "
            "(--overwrite) to replace it."
        )


def export_model(
    model: Any = None,
    output_dir: str | None = None,
    backend: str = "onnx",
    quantize: bool | str | None = None,
    overwrite: bool = False,
) -> str:
    """Export a model for ONNX Runtime or OpenVINO into ``output_dir``; returns the exported file. Offline.

    ``model``: a loaded torch ``SentenceTransformer``, or what :func:`load_model` takes (``None``: the
    default model). ``output_dir`` (required; it is the cache) receives the sentence-transformers
    model itself (tokenizer, pooling, span settings) and, beside it, ``onnx/model.onnx``; with
    ``quantize`` (``True``: this CPU's setting, or ``"avx512_vnni"``, ``"avx2"``, ``"arm64"``, …)
    the dynamic int8 ``onnx/model_qint8_<config>.onnx``; for OpenVINO ``openvino/openvino_model.xml``
    (converted from the ONNX file). Files already there are reused unless ``overwrite``. Load the
    result with ``load_model(output_dir, backend=..., quantized=...)``. Needs ``slice-st[onnx]``
    (and ``[openvino]`` for OpenVINO).

    Args:
        model: A loaded torch ``SentenceTransformer``, or what :func:`load_model` takes (``None``: the default model).
        output_dir: Folder of the export (required; it is the cache).
        backend: ``"onnx"`` or ``"openvino"``.
        quantize: ``True`` (this CPU's int8 setting) or a config name (``"avx512_vnni"``, ``"avx2"``, ``"arm64"``, …);
            ONNX only.
        overwrite: Export again even if the file exists.

    Returns:
        The path of the exported file.
    """
    import json
    import os
    from pathlib import Path

    from slice_st.backends import (
        DEFAULT_FILES,
        QUANTIZATION_CONFIGS,
        backend_of,
        check_backend,
        cpu_quantization_config,
        export_onnx,
        export_openvino,
        quantize_onnx,
    )

    check_backend(backend)
    if output_dir is None:
        raise SpanInputError("export_model needs output_dir: the folder that keeps the exported model.")
    if backend == "torch":
        raise SpanInputError("backend='torch' needs no export: save the model with model.save(path).")
    if quantize and backend != "onnx":
        raise SpanInputError("quantize applies to ONNX exports (dynamic int8); OpenVINO runs the float export.")
    config = (cpu_quantization_config() if quantize is True else quantize) if quantize else None
    if config is not None and config not in QUANTIZATION_CONFIGS:
        raise SpanInputError(f"quantize must be True or one of {', '.join(QUANTIZATION_CONFIGS)}, got {quantize!r}.")
    output = Path(output_dir)
    if not overwrite:
        _check_export_source(model, output)
    onnx_file = output / DEFAULT_FILES["onnx"]
    if backend == "openvino":
        target = output / DEFAULT_FILES["openvino"]
    else:
        target = output / "onnx" / f"model_qint8_{config}.onnx" if config else onnx_file
    if target.is_file() and not overwrite:
        return str(target)
    require_backend(backend, export=True)
    if overwrite or not onnx_file.is_file():
        if model is not None and not isinstance(model, (str, os.PathLike)):  # a loaded model
            if backend_of(model) != "torch":
                raise SpanInputError("Exporting needs the model loaded on the torch backend.")
        elif (output / "modules.json").is_file() and not overwrite:
            model = load_model(str(output), device="cpu")
        else:
            model = load_model(model, device="cpu")
    created = not os.path.lexists(output)
    writing: list[Path] = []  # what a failed write leaves half-written, removed then (the whole folder if created here)
    try:
        if overwrite or not onnx_file.is_file():
            if overwrite or not (output / "modules.json").is_file():
                writing += [output / "modules.json", output / EXPORT_RECORD]
                output.mkdir(parents=True, exist_ok=True)
                model.save(str(output))
                _usual_permissions(str(output))
                (output / EXPORT_RECORD).write_text(
                    json.dumps({"source": _export_source(model)}) + "\n", encoding="utf-8"
                )
            writing.append(onnx_file)
            export_onnx(model, onnx_file)
        writing.append(target)
        if backend == "openvino":
            return str(export_openvino(onnx_file, target))
        if config:
            return str(quantize_onnx(onnx_file, target, config))
        return str(onnx_file)
    except Exception as error:  # a full disk or an I/O error: OSError, or safetensors' SafetensorError
        if not (isinstance(error, OSError) or type(error).__name__ == "SafetensorError"):
            raise
        _remove_partial_export(output, created, writing)
        from slice_st.errors import FileAccessError

        if isinstance(error, FileAccessError):
            raise
        detail = error.strerror if isinstance(error, OSError) and error.strerror else " ".join(str(error).split())
        raise FileAccessError(
            f"cannot export the model to {output}: {detail} (nothing half-written was kept)."
        ) from error


def _remove_partial_export(output, created: bool, writing: list) -> None:
    """After a failed export: the folder if this export created it, else only the files it was writing (links as
    links)."""
    import os
    import shutil

    if created:
        shutil.rmtree(output, ignore_errors=True)
        return
    for path in writing:
        try:
            if os.path.lexists(path) and not os.path.isdir(path) or os.path.islink(path):
                os.unlink(path)
        except OSError:
            pass


def _load_failure(name: str, is_folder: bool, error: Exception) -> str:
    import os

    detail = (str(error).strip().splitlines() or [type(error).__name__])[0]
    if is_folder:
        return f"Cannot load the model in {name}: {detail} ({type(error).__name__})."
    offline = os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on")
    if offline:
        return (
            f"Model {name!r} is not a local folder and not in the Hugging Face cache, and HF_HUB_OFFLINE is set, "
            "so it cannot be downloaded: give a local folder, or download it first."
        )
    problem = _hub_problem(error)
    if problem:
        return f"Cannot load model {name!r} from the Hugging Face Hub: {problem}."
    return f"Cannot load model {name!r} from the Hugging Face Hub: {detail} ({type(error).__name__})."


def _hub_problem(error: BaseException) -> str | None:
    """What a Hub download error means to a user, from ``huggingface_hub``'s own error classes anywhere in the chain
    of causes (transformers and sentence-transformers wrap them); ``None`` if none is there."""
    import os

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
    if {"ConnectError", "ConnectionError", "ConnectTimeout", "TimeoutException", "LocalEntryNotFoundError"} & names:
        return (
            f"the Hub at {endpoint} cannot be reached and the model is not in the local cache; check the network "
            "(or HF_ENDPOINT), or download the model once while online"
        )
    if "RemoteEntryNotFoundError" in names:
        return "the repository lacks a file the model needs (is it a sentence-transformers model?)"
    return None


def hub_offline() -> bool:
    """Whether the Hugging Face Hub is switched off (``HF_HUB_OFFLINE=1``)."""
    import os

    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def model_fingerprint(model: SentenceTransformer) -> str:
    """A short hash of the model's weights and tokenizer: what identifies a model for the index (which
    refuses another model) and for the Table-1 cache (whatever its folder is called).

    Every weight contributes: the SHA-256 runs over every tensor of the state dict (name, shape, dtype
    and all its bytes, in the state dict's order, one tensor at a time), so any change to any weight — a
    merged LoRA adapter, one embedding row replaced — gives another fingerprint. A model running on
    ONNX Runtime or OpenVINO is identified by its exported file (its bytes and the backend): its
    vectors differ from the torch model's (int8: clearly), so an index built on one backend is
    searched on the same one.

    Args:
        model: A ``SentenceTransformer``.

    Returns:
        A short hex digest.
    """
    import hashlib

    import torch

    from slice_st.backends import backend_of, weight_files

    digest = hashlib.sha256()
    tokenizer = model.tokenizer
    digest.update(f"{type(tokenizer).__name__}:{len(tokenizer) if tokenizer is not None else 0}".encode())
    backend = backend_of(model)
    if backend != "torch":
        digest.update(backend.encode())
        config = hf_config(model)
        digest.update(str(getattr(config, "hidden_size", "")).encode())
        for file in weight_files(model):
            with open(file, "rb") as handle:
                for block in iter(lambda: handle.read(1 << 20), b""):
                    digest.update(block)
        return digest.hexdigest()[:16]
    for name, tensor in model.state_dict().items():
        values = tensor.detach().reshape(-1).contiguous().cpu()
        digest.update(f"{name}|{tuple(tensor.shape)}|{tensor.dtype}".encode())
        digest.update(values.view(torch.uint8).numpy())  # the raw bytes, whatever the dtype (bfloat16 too)
    return digest.hexdigest()[:16]


def model_identity(model: SentenceTransformer) -> tuple[str, str]:
    """``(name, path)`` of a model: a readable name, and the local directory it was loaded from (``""`` if none).

    A Hub model is named by its id; a local one by its directory's name (with the parent's for
    generic names such as ``final`` or ``checkpoint-500``); the embedded base by its Hub id, and a
    model shipped in the package by its shipped name.

    Args:
        model: A ``SentenceTransformer``.

    Returns:
        ``(name, path)``.

    Example:
        >>> model_identity(load_model("base")), model_identity(load_model())
        (('sentence-transformers/all-MiniLM-L6-v2', ''), ('slice-minilm', ''))
    """
    import os
    import re

    card = getattr(model, "model_card_data", None)
    hub_id = (
        getattr(card, "model_id", None)
        or getattr(card, "shipped_name", None)
        or getattr(card, "base_model", None)
        or ""
    )
    source = ""
    try:
        for module in model:
            config = getattr(getattr(module, "auto_model", None), "config", None)
            if config is not None:
                source = str(getattr(config, "name_or_path", "") or "")
                break
    except TypeError:  # not a module list
        pass
    if not source or not os.path.isdir(source):
        return (hub_id or source), ""
    path = os.path.abspath(source)
    if re.fullmatch(r"\d+_\w+", os.path.basename(path)):  # the transformer inside an ST folder (0_Transformer)
        path = os.path.dirname(path)
    try:
        if os.path.samefile(path, default_model_path()):  # the embedded base, or a shipped model built on it
            return hub_id or DEFAULT_MODEL_NAME, ""
    except OSError:
        pass
    name = os.path.basename(path)
    if re.fullmatch(r"(model|final|best|last|output|checkpoint(-\d+)?)", name, flags=re.IGNORECASE):
        name = f"{os.path.basename(os.path.dirname(path))}/{name}"
    return hub_id or name, path


def has_adapters(model) -> bool:
    """True when a PEFT adapter (e.g. LoRA from ``model.add_adapter``) is attached to the model's transformer."""
    for module in model:
        auto_model = getattr(module, "auto_model", None)
        if auto_model is not None:
            return bool(getattr(auto_model, "_hf_peft_config_loaded", False))
    return False


def merged_adapters(model):
    """``model`` itself if it has no adapter, else a copy with its LoRA adapters merged into plain weights.

    The copy has no PEFT layers left: it saves, loads and runs like any ``SentenceTransformer``.
    """
    if not has_adapters(model):
        return model
    import copy

    BaseTunerLayer = require("peft.tuners.tuners_utils", "train", "merging LoRA adapters").BaseTunerLayer

    clone = copy.deepcopy(model)
    for module in clone:
        auto_model = getattr(module, "auto_model", None)
        if auto_model is None:
            continue
        for name, layer in list(auto_model.named_modules()):
            if isinstance(layer, BaseTunerLayer):
                layer.merge(safe_merge=True)
                parent_name, _, child = name.rpartition(".")
                setattr(
                    auto_model.get_submodule(parent_name) if parent_name else auto_model, child, layer.get_base_layer()
                )
        # A fresh instance: loading an adapter leaves key-renaming state that would prefix every key on save.
        fresh = type(auto_model)(auto_model.config).to(auto_model.device, auto_model.dtype)
        fresh.load_state_dict(auto_model.state_dict())
        fresh.eval() if not auto_model.training else fresh.train()
        module.model = fresh
        break
    return clone


def check_model_target(path: str, overwrite: bool = False) -> str:
    """Check, before any work, that a model can be saved at ``path``; returns it.

    ``path`` must be a new folder under a writable one, or an empty folder (one with files in it only
    with ``overwrite=True``: its files of the same names are then replaced), never a symbolic link. Else a
    :class:`slice_st.errors.FileAccessError` naming the path.

    Args:
        path: The folder to save into.
        overwrite: Allow a folder that already has files in it.

    Returns:
        ``path``.

    Example:
        >>> check_model_target("notes.txt")  # doctest: +SKIP
        Traceback (most recent call last):
        ...
        slice_st.errors.FileAccessError: cannot save a model to notes.txt: it is a file, not a folder.
    """
    import os

    from slice_st.errors import FileAccessError
    from slice_st.text import check_creatable, check_not_link

    path = os.fspath(path)
    check_not_link(path, "cannot save a model: output", "to save it into")  # nothing is written through a link
    if os.path.exists(path):
        if not os.path.isdir(path):
            raise FileAccessError(f"cannot save a model to {path}: it is a file, not a folder.")
        if not os.access(path, os.W_OK | os.X_OK):
            raise FileAccessError(f"cannot save a model to {path}: the folder is not writable (permission denied).")
        if os.listdir(path) and not overwrite:
            raise FileAccessError(
                f"cannot save a model to {path}: the folder is not empty (its README.md, config.json… would be "
                "replaced); name a new or empty folder, or pass overwrite=True."
            )
        return path
    try:
        check_creatable(path)
    except FileAccessError as error:
        raise FileAccessError(f"cannot save a model: {error}") from None
    return path


def save_slice_model(model, path: str, *, overwrite: bool = False, **save_kwargs: Any) -> str:
    """Save ``model`` as a checkpoint that plain ``SentenceTransformer(path)`` loads, no trust flag needed.

    LoRA adapters (training with ``--lora-r``) are merged into the weights first (:func:`merged_adapters`).

    The span settings go into the transformer's ``config.json`` (``encode_spans`` on the loaded model uses them); a
    pipeline built with ``SpanPooling`` as a module is written with the equivalent mean ``Pooling``.
    Keyword arguments go to ``SentenceTransformer.save``. Returns ``path``.

    ``path`` must be a new or empty folder: a folder with files in it (a user's ``README.md``,
    ``config.json``…) is refused unless ``overwrite=True``; a symbolic link, a file, a path under a file or an
    unwritable parent is a :class:`slice_st.errors.FileAccessError` (see :func:`check_model_target`), as is a
    failed write.

    Args:
        model: The ``SentenceTransformer`` to save.
        path: Output folder.
        overwrite: Replace the files of a folder that already holds some (only the checkpoint's own files).
        **save_kwargs: Passed to ``model.save``.

    Returns:
        ``path``.
    """
    import os

    from slice_st.errors import FileAccessError

    check_model_target(path, overwrite)
    created = not os.path.lexists(path)
    was_empty = created or not os.listdir(path)
    try:
        return _save_slice_model(model, os.fspath(path), **save_kwargs)
    except Exception as error:  # a full disk: OSError, or safetensors' SafetensorError
        if not (isinstance(error, OSError) or type(error).__name__ == "SafetensorError"):
            raise
        if was_empty:  # nothing of the user's was there: leave nothing half-written
            _empty_folder(os.fspath(path))
            if created and os.path.isdir(path) and not os.path.islink(path):
                os.rmdir(path)
        if isinstance(error, FileAccessError):
            raise
        detail = error.strerror if isinstance(error, OSError) and error.strerror else " ".join(str(error).split())
        where = f" ({error.filename})" if isinstance(error, OSError) and error.filename else ""
        raise FileAccessError(f"cannot save a model to {path}: {detail}{where}.") from error


def _empty_folder(path: str) -> None:
    """Remove what a failed save wrote into the new or empty folder ``path`` (links as links, never followed)."""
    import os
    import shutil

    if not os.path.isdir(path) or os.path.islink(path):
        return
    for entry in os.scandir(path):
        if entry.is_dir(follow_symlinks=False):
            shutil.rmtree(entry.path, ignore_errors=True)
        else:
            os.unlink(entry.path)


def _save_slice_model(model, path: str, **save_kwargs: Any) -> str:
    from sentence_transformers.sentence_transformer.modules import Pooling

    settings = get_span_config(model)
    model = merged_adapters(model)
    pooling = span_pooling_module(model)
    if pooling is not None and any(module is pooling for module in model):  # a pipeline with SpanPooling as a module
        modules = [Pooling(pooling.embedding_dimension, "mean") if module is pooling else module for module in model]
        original, card = model, model.model_card_data
        model = rebuilt_model(model, modules, model_card_data=card)  # the same card (a SLICE one, if trained)
        set_span_config(model, settings.min_span, settings.max_span, settings.unit)
        model.save(path, **save_kwargs)
        _usual_permissions(path)
        card.register_model(original)
        return path
    set_span_config(model, settings.min_span, settings.max_span, settings.unit)
    model.save(path, **save_kwargs)
    _usual_permissions(path)
    return path


def _usual_permissions(path: str) -> None:
    """Give the ``.safetensors`` files just saved in ``path`` the permissions of the other files (``0666 & ~umask``):
    the writer makes them through a private temporary file (0600) while ``config.json`` and the rest are 0644."""
    import os

    mask = os.umask(0)
    os.umask(mask)
    for folder, _, names in os.walk(path):
        for name in names:
            file = os.path.join(folder, name)
            if name.endswith(".safetensors") and not os.path.islink(file) and os.path.isfile(file):
                os.chmod(file, 0o666 & ~mask)
