"""Inference backends for span encoding: ONNX Runtime and OpenVINO, int8 exports, half precision, threads.

Span encoding only needs the transformer's token vectors, so the forward pass can run anywhere that
returns them. A sentence-transformers model keeps its transformer in ``model[0].model`` (alias
``auto_model``); this module puts an ONNX Runtime or OpenVINO runner there (:class:`OnnxEncoder`,
:class:`OpenVINOEncoder`), keeping the model's own tokenizer, ``max_seq_length``, pooling, span
settings (the ``slice_st`` key of its config) and ``encode`` — so offsets, windows and spans are
exactly the torch ones. Only the token vectors differ, by float tolerance (int8: more).

Why not ``SentenceTransformer(path, backend="onnx")``? sentence-transformers 6.2 loads that backend
through ``optimum-onnx``, whose only release (0.1.0) needs ``transformers<4.58`` while
sentence-transformers 6 needs ``transformers>=5``: ``pip install "sentence-transformers[onnx]"``
cannot resolve, and forcing it fails at import. Its OpenVINO backend (``optimum-intel`` 2.2) needs
``transformers<5.6`` and ``huggingface-hub<1.22``. Models loaded that way still work with every
slice-st function (nothing here assumes a torch transformer); this module is what works on the
current stack with two small extras:

* ``pip install "slice-st[onnx]"``: ``onnxruntime`` (run), ``onnx`` + ``onnxscript`` (export with
  ``torch.onnx``), quantization with ONNX Runtime's own dynamic int8 quantizer;
* ``pip install "slice-st[openvino]"``: ``openvino`` (runs the IR converted from the ONNX export,
  which therefore also needs the ``onnx`` extra to be made).

Files use sentence-transformers' layout and names (``onnx/model.onnx``,
``onnx/model_qint8_avx512_vnni.onnx``, ``openvino/openvino_model.xml``), with the usual
``input_ids``/``attention_mask``/``token_type_ids`` → ``last_hidden_state`` signature, so a folder
exported here is also what ``SentenceTransformer(folder, backend=...)`` looks for.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Any

import torch

from slice_st.errors import SpanInputError

BACKENDS = ("torch", "onnx", "openvino")
#: What each backend imports (``slice_st.load_model``/``export_model`` check them first, naming the extra).
RUNTIME_MODULES = {"onnx": ("onnxruntime",), "openvino": ("openvino",)}
EXPORT_MODULES = ("onnxruntime", "onnx", "onnxscript")  # torch.onnx's exporter, ONNX Runtime's quantizer
DEFAULT_FILES = {"onnx": "onnx/model.onnx", "openvino": "openvino/openvino_model.xml"}
#: Dynamic int8 settings named like optimum's ``AutoQuantizationConfig`` (and sentence-transformers' file names).
QUANTIZATION_CONFIGS = {
    "avx512_vnni": {"per_channel": True, "reduce_range": False},
    "avx512": {"per_channel": True, "reduce_range": False},
    "avx2": {"per_channel": True, "reduce_range": True},
    "arm64": {"per_channel": True, "reduce_range": False},
}
#: Operators quantized to int8 (the matrix products: nearly all of a BERT's time; embeddings stay float).
QUANTIZED_OPS = ["MatMul", "Gemm"]
DTYPES = {
    "float32": torch.float32,
    "fp32": torch.float32,
    "float16": torch.float16,
    "fp16": torch.float16,
    "half": torch.float16,
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
}


def check_backend(backend: str) -> str:
    if backend not in BACKENDS:
        raise SpanInputError(f"backend must be one of {', '.join(BACKENDS)}, got {backend!r}.")
    return backend


def resolve_dtype(dtype: Any) -> torch.dtype | None:
    """``"bf16"``/``"bfloat16"``/``torch.bfloat16`` → ``torch.bfloat16`` (``None`` stays ``None``).

    >>> resolve_dtype("bf16"), resolve_dtype(None)
    (torch.bfloat16, None)
    """
    if dtype is None or isinstance(dtype, torch.dtype):
        return dtype
    if isinstance(dtype, str) and dtype.lower() in DTYPES:
        return DTYPES[dtype.lower()]
    raise SpanInputError(f"dtype must be one of {', '.join(sorted(DTYPES))}, got {dtype!r}.")


# ------------------------------------------------------------------------------------------ threads
def _env_threads() -> int | None:
    value = os.environ.get("SLICE_ST_THREADS", "").strip()
    return int(value) if value.isdigit() and int(value) > 0 else None


def default_threads() -> int:
    """Intra-op threads of the forward pass when none are given: ``SLICE_ST_THREADS`` if set, else torch's own.

    Torch's own setting is ``torch.get_num_threads()`` (the machine's cores, or ``OMP_NUM_THREADS``), right on a
    laptop, a many-core server and a GPU box alike. On a small machine shared with other jobs, set fewer (e.g.
    ``SLICE_ST_THREADS=1`` or ``--threads 1``): threads waiting for a busy core slow the forward pass down.
    ONNX Runtime and OpenVINO sessions use this count too.

    Returns:
        The number of threads, at least 1.

    Example:
        >>> import torch
        >>> given = os.environ.get("SLICE_ST_THREADS")
        >>> default_threads() == (int(given) if given else torch.get_num_threads())
        True
    """
    return _env_threads() or max(1, torch.get_num_threads())


#: At most this many threads or encoding processes per CPU core this process may use (more only thrash).
PER_CORE_LIMIT = 4


def parallelism_limit() -> int:
    """The most threads (``--threads``) or CPU encoding processes (``--processes``) accepted:
    :data:`PER_CORE_LIMIT` per CPU core this process may use."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # no affinity on this platform
        cores = os.cpu_count() or 1
    return PER_CORE_LIMIT * max(1, cores)


def check_parallelism(value: int, name: str) -> int:
    """``value`` if it is a positive integer within :func:`parallelism_limit`, else a ``ValueError`` naming ``name``.

    Args:
        value: a number of threads or processes.
        name: what it is, for the message (``"threads"``, ``"processes"``).

    Returns:
        ``value``.

    Example:
        >>> check_parallelism(1, "threads")
        1
    """
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise SpanInputError(f"{name} must be a positive integer, got {value!r}.")
    limit = parallelism_limit()
    if value > limit:
        raise SpanInputError(
            f"{name}={value} is more than this machine can use: at most {limit} "
            f"({PER_CORE_LIMIT} per CPU core available to this process)."
        )
    return value


def set_torch_threads(threads: int | None = None) -> int:
    """Set torch's intra-op threads to ``threads`` (or ``SLICE_ST_THREADS``); with neither, leave torch's own setting.

    Args:
        threads: The number of threads (at most :func:`parallelism_limit`), or ``None`` to keep torch's setting
            (unless ``SLICE_ST_THREADS`` is set).

    Returns:
        torch's number of intra-op threads afterwards.
    """
    threads = check_parallelism(int(threads), "threads") if threads else _env_threads()
    if threads:
        torch.set_num_threads(threads)
    return torch.get_num_threads()


# ------------------------------------------------------------------------------------------ runners
class _Runner(torch.nn.Module):
    """What ``Transformer.model`` is for a non-torch backend: token vectors from an exported graph.

    A module without parameters (so ``model.to``/``eval``/``half`` are no-ops), with the transformer's
    Hugging Face ``config`` (span settings and the embedding size are read from it), a ``device``, and
    a ``forward`` taking the tokenizer's tensors and returning ``last_hidden_state`` as a CPU float32
    torch tensor.
    """

    backend = "torch"

    def __init__(self, config, path: str) -> None:
        super().__init__()
        self.config, self.path = config, str(path)
        self.input_names: list[str] = []

    @property
    def device(self) -> torch.device:
        return torch.device("cpu")

    @property
    def dtype(self) -> torch.dtype:
        return torch.float32

    def _inputs(self, features: dict[str, Any]) -> dict[str, Any]:
        inputs = {}
        for name in self.input_names:
            value = features.get(name)
            if value is None:
                if name != "token_type_ids":
                    raise SpanInputError(f"The {self.backend} model needs the input {name!r}.")
                value = torch.zeros_like(features["input_ids"])
            inputs[name] = value.detach().cpu().numpy().astype("int64", copy=False)
        return inputs

    def forward(self, input_ids=None, attention_mask=None, token_type_ids=None, **_: Any):
        from transformers.modeling_outputs import BaseModelOutput

        features = {"input_ids": input_ids, "attention_mask": attention_mask, "token_type_ids": token_type_ids}
        hidden = torch.from_numpy(self._run(self._inputs(features)))
        if hidden.dtype != torch.float32:
            hidden = hidden.float()
        return BaseModelOutput(last_hidden_state=hidden.to(input_ids.device))

    def _run(self, inputs: dict[str, Any]):  # pragma: no cover - overridden
        raise NotImplementedError

    def files(self) -> list[Path]:
        """The files the weights are read from (an OpenVINO ``.xml`` has its ``.bin`` beside it)."""
        path = Path(self.path)
        files = [path]
        if path.suffix == ".xml" and path.with_suffix(".bin").is_file():
            files.append(path.with_suffix(".bin"))
        return files

    def save_pretrained(self, *_: Any, **__: Any) -> None:
        raise NotImplementedError(
            f"A model running on {self.backend} cannot be saved: save the torch model, then export it "
            "(slice_st.export_model / slice-st export)."
        )

    def extra_repr(self) -> str:
        return f"backend={self.backend!r}, path={self.path!r}"


class OnnxEncoder(_Runner):
    """An ONNX file run by ONNX Runtime (CPU by default; ``providers`` for others)."""

    backend = "onnx"

    def __init__(self, config, path: str, threads: int | None = None, providers: list[str] | None = None) -> None:
        super().__init__(config, path)
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = threads or default_threads()
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        # Busy-waiting worker threads steal a shared core from the thread doing the work.
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self.threads = options.intra_op_num_threads
        self.session = ort.InferenceSession(
            str(path), sess_options=options, providers=providers or ["CPUExecutionProvider"]
        )
        self.input_names = [item.name for item in self.session.get_inputs()]
        self.output_name = self.session.get_outputs()[0].name

    def _run(self, inputs):
        return self.session.run([self.output_name], inputs)[0]


class OpenVINOEncoder(_Runner):
    """An OpenVINO IR (``.xml`` + ``.bin``) or ONNX file compiled by OpenVINO for the CPU.

    ``precision`` is OpenVINO's inference precision: ``"f32"`` (default: the exported weights as they
    are; on CPUs with AMX or AVX512-BF16 OpenVINO would otherwise pick bf16) or ``"bf16"``/``"f16"``.
    """

    backend = "openvino"

    def __init__(
        self, config, path: str, threads: int | None = None, precision: str = "f32", device: str = "CPU"
    ) -> None:
        super().__init__(config, path)
        import openvino as ov

        self.threads = threads or default_threads()
        properties = {
            "INFERENCE_NUM_THREADS": self.threads,
            "PERFORMANCE_HINT": "LATENCY",
            "NUM_STREAMS": 1,
            "INFERENCE_PRECISION_HINT": precision,
        }
        core = ov.Core()
        self.compiled = core.compile_model(core.read_model(str(path)), device, properties)
        self.request = self.compiled.create_infer_request()
        self.input_names = [next(iter(port.get_names())) for port in self.compiled.inputs]
        self.output = self.compiled.outputs[0]

    def _run(self, inputs):
        return self.request.infer(inputs)[self.output].copy()


def runner_of(model) -> _Runner | None:
    """The ONNX Runtime / OpenVINO runner inside ``model`` (``None`` on torch)."""
    try:
        modules = list(model)
    except TypeError:
        return None
    for module in modules:
        inner = getattr(module, "model", None)
        if isinstance(inner, _Runner):
            return inner
    return None


def weight_files(model) -> list[Path]:
    """The files a non-torch model runs from: this module's runner's, or (best effort) those of a model
    loaded by sentence-transformers' own ``backend="onnx"|"openvino"`` (optimum's ``model_path``)."""
    runner = runner_of(model)
    if runner is not None:
        return runner.files()
    try:
        inner = getattr(model[0], "model", None)
    except (TypeError, IndexError):
        return []
    path = getattr(inner, "model_path", None) or getattr(inner, "path", None)
    if path is None or not Path(path).is_file():
        return []
    path = Path(path)
    return [path] + ([path.with_suffix(".bin")] if path.suffix == ".xml" and path.with_suffix(".bin").is_file() else [])


def backend_of(model) -> str:
    """``"torch"``, ``"onnx"`` or ``"openvino"``: where the model's forward pass runs (also for a
    model loaded by sentence-transformers' own ``backend=...``)."""
    runner = runner_of(model)
    if runner is not None:
        return runner.backend
    return str(getattr(model, "backend", "torch") or "torch")


def attach_runtime(model, backend: str, path: str | os.PathLike, threads: int | None = None, **runner_kwargs: Any):
    """Run ``model``'s transformer on ``backend`` from the exported file ``path``; returns the model.

    The model keeps its tokenizer, pooling and settings. Its torch transformer is dropped.
    """
    check_backend(backend)
    module = model[0]
    config = getattr(getattr(module, "model", None), "config", None)
    if config is None:
        raise SpanInputError("The model's first module has no Hugging Face transformer to replace.")
    runner_class = {"onnx": OnnxEncoder, "openvino": OpenVINOEncoder}[backend]
    module.model = runner_class(config, str(path), threads=threads, **runner_kwargs)
    module.backend = backend
    model.backend = backend
    return model


# ------------------------------------------------------------------------------------------ exports
def model_file_for(
    folder: str | os.PathLike, backend: str, model_file: str | None = None, quantized: bool | str = False
) -> Path | None:
    """The exported file to load from ``folder`` (``None`` if there is none yet).

    ``model_file`` is relative to ``folder`` (``"onnx/model_qint8_avx512_vnni.onnx"``); ``quantized``
    picks ``onnx/model_qint8_<config>.onnx`` (``True``: the first there is, preferring this CPU's config).
    """
    folder = Path(folder)
    if model_file:
        candidate = Path(model_file) if Path(model_file).is_absolute() else folder / model_file
        return candidate if candidate.is_file() else None
    if quantized:
        if backend != "onnx":
            raise SpanInputError(
                "quantized=True selects an int8 ONNX export; for OpenVINO pass model_file=... instead."
            )
        names = (
            [f"model_qint8_{quantized}.onnx"]
            if isinstance(quantized, str)
            else [f"model_qint8_{cpu_quantization_config()}.onnx"]
        )
        names += sorted(path.name for path in (folder / "onnx").glob("model_qint8_*.onnx"))
        return next((folder / "onnx" / name for name in names if (folder / "onnx" / name).is_file()), None)
    candidate = folder / DEFAULT_FILES[backend]
    return candidate if candidate.is_file() else None


def cpu_quantization_config() -> str:
    """The dynamic-int8 setting for this CPU: ``avx512_vnni``, ``avx512``, ``avx2`` or ``arm64``."""
    import platform

    if platform.machine().lower() in ("arm64", "aarch64"):
        return "arm64"
    try:
        flags = Path("/proc/cpuinfo").read_text(errors="ignore")
    except OSError:
        return "avx2"
    if "avx512_vnni" in flags:
        return "avx512_vnni"
    return "avx512" if "avx512f" in flags else "avx2"


class _Encoder(torch.nn.Module):
    """The transformer as a function of plain tensors → ``last_hidden_state`` (what is exported)."""

    def __init__(self, inner: torch.nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, input_ids, attention_mask):
        return self.inner(input_ids=input_ids, attention_mask=attention_mask, return_dict=True).last_hidden_state


class _TokenTypeEncoder(_Encoder):
    def forward(self, input_ids, attention_mask, token_type_ids):
        return self.inner(
            input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids, return_dict=True
        ).last_hidden_state


def export_onnx(model, path: str | os.PathLike) -> Path:
    """Export the transformer of a (torch) sentence-transformers ``model`` to the ONNX file ``path``.

    Uses ``torch.onnx.export`` (the ``torch.export`` exporter: the TorchScript one mis-traces the
    attention masks of transformers 5); batch and sequence length are dynamic.
    """
    module = model[0]
    transformer = getattr(module, "model", None)
    if not isinstance(transformer, torch.nn.Module) or isinstance(transformer, _Runner):
        raise SpanInputError("Exporting needs the model loaded on the torch backend.")
    tokenizer = model.tokenizer
    example = tokenizer(["A short example sentence for the export.", "Two words"], padding=True, return_tensors="pt")
    names = [name for name in ("input_ids", "attention_mask", "token_type_ids") if name in example]

    wrapper = (_TokenTypeEncoder if "token_type_ids" in names else _Encoder)(transformer).eval().float().cpu()
    batch, sequence = torch.export.Dim("batch"), torch.export.Dim("sequence")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.filterwarnings(
            "ignore", message=r".*(axis name|LeafSpec)", category=Warning
        )  # shared batch/sequence axes
        torch.onnx.export(
            wrapper,
            tuple(example[name] for name in names),
            str(path),
            input_names=names,
            output_names=["last_hidden_state"],
            dynamic_shapes={name: {0: batch, 1: sequence} for name in names},
            dynamo=True,
            external_data=False,
            verbose=False,
        )
    return path


def quantize_onnx(source: str | os.PathLike, target: str | os.PathLike, config: str = "avx512_vnni") -> Path:
    """Dynamic int8 quantization of an ONNX file (weights int8, activations quantized on the fly).

    ``config`` names the target CPU like optimum's ``AutoQuantizationConfig`` (see
    :data:`QUANTIZATION_CONFIGS`). Only the matrix products are quantized.
    """
    if config not in QUANTIZATION_CONFIGS:
        raise SpanInputError(f"quantization config must be one of {', '.join(QUANTIZATION_CONFIGS)}, got {config!r}.")
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from onnxruntime.quantization.shape_inference import quant_pre_process

    settings = QUANTIZATION_CONFIGS[config]
    target = Path(target)
    prepared = target.with_name(target.stem + ".prep.onnx")
    try:
        quant_pre_process(str(source), str(prepared), skip_symbolic_shape=True)
        quantize_dynamic(
            str(prepared),
            str(target),
            weight_type=QuantType.QInt8,
            op_types_to_quantize=QUANTIZED_OPS,
            per_channel=settings["per_channel"],
            reduce_range=settings["reduce_range"],
        )
    finally:
        prepared.unlink(missing_ok=True)
    return target


def export_openvino(onnx_path: str | os.PathLike, target: str | os.PathLike) -> Path:
    """Convert an ONNX file to an OpenVINO IR (``target`` ``.xml`` plus its ``.bin``), weights kept in float32."""
    import openvino as ov

    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    ov.save_model(ov.convert_model(str(onnx_path)), str(target), compress_to_fp16=False)
    return target


def export_files(folder: str | os.PathLike) -> dict[str, list[str]]:
    """The exported files a model folder holds, by backend.

    >>> export_files("/nonexistent")
    {'onnx': [], 'openvino': []}
    """
    folder = Path(folder)
    return {
        "onnx": sorted(p.relative_to(folder).as_posix() for p in (folder / "onnx").glob("*.onnx")),
        "openvino": sorted(p.relative_to(folder).as_posix() for p in (folder / "openvino").glob("*.xml")),
    }
