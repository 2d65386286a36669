"""Forward-pass backends: ONNX Runtime and OpenVINO runners in place of ``model[0].model`` (the model keeps the rest),
ONNX/int8/OpenVINO exports in sentence-transformers' file layout (docs/guides/backends.md), threads."""

from __future__ import annotations

import os
import platform
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from slice_st.errors import SpanInputError

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

BACKENDS = ("torch", "onnx", "openvino")
DEFAULT_FILES = {"onnx": "onnx/model.onnx", "openvino": "openvino/openvino_model.xml"}
#: Dynamic int8 settings (per-channel, ``reduce_range``) named like optimum's ``AutoQuantizationConfig``.
QUANTIZATION_CONFIGS = {"avx512_vnni": False, "avx512": False, "avx2": True, "arm64": False}
DTYPES = {
    "float32": torch.float32,
    "fp32": torch.float32,
    "float16": torch.float16,
    "fp16": torch.float16,
}
DTYPES |= {"half": torch.float16, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16}


def half_precision_kwargs(dtype: torch.dtype, device: str | None) -> dict[str, Any]:
    """``model_kwargs`` for half-precision torch weights: eager attention on a CPU running below-AVX-512 kernels.

    torch's fused CPU attention packs half-precision blocks for AMX whenever the hardware has AMX, with code that
    exists only in its AVX-512 kernels: with those kernels switched off (``ATEN_CPU_CAPABILITY=avx2`` or
    ``default`` on an AMX machine) it raises "pack_vnni2 is only supported when avx512 is supported". A CPU without
    AVX-512 has no AMX, so this only changes runs with the kernels capped; eager attention takes another path.
    """
    from sentence_transformers.util import get_device_name

    on_cpu = torch.device(device or get_device_name()).type == "cpu"
    x86 = platform.machine().lower() in ("x86_64", "amd64")
    capped = x86 and torch.backends.cpu.get_cpu_capability() in ("DEFAULT", "NO AVX", "AVX2")
    half = dtype in (torch.float16, torch.bfloat16)
    return {"dtype": dtype} | (
        {"attn_implementation": "eager"} if half and on_cpu and capped else {}
    )


def check_backend(backend: str) -> str:
    if backend not in BACKENDS:
        raise SpanInputError(f"backend must be one of {', '.join(BACKENDS)}, got {backend!r}.")
    return backend


def resolve_dtype(dtype: Any) -> torch.dtype | None:
    """``"bf16"``/``"bfloat16"``/``torch.bfloat16`` → ``torch.bfloat16`` (``None`` stays ``None``)."""
    if dtype is None or isinstance(dtype, torch.dtype):
        return dtype
    if isinstance(dtype, str) and dtype.lower() in DTYPES:
        return DTYPES[dtype.lower()]
    raise SpanInputError(f"dtype must be one of {', '.join(sorted(DTYPES))}, got {dtype!r}.")


def _env_threads() -> int | None:
    value = os.environ.get("SLICE_ST_THREADS", "").strip()
    return int(value) if value.isdigit() and int(value) > 0 else None


def default_threads() -> int:
    """Intra-op threads of the forward pass when none are given: ``SLICE_ST_THREADS``, else torch's own."""
    return _env_threads() or max(1, torch.get_num_threads())


#: At most this many threads or encoding processes per CPU core this process may use (more only thrash).
PER_CORE_LIMIT = 4


def parallelism_limit() -> int:
    """The most threads or CPU encoding processes accepted: :data:`PER_CORE_LIMIT` per CPU core this process may use."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # no affinity on this platform
        cores = os.cpu_count() or 1
    return PER_CORE_LIMIT * max(1, cores)


def check_parallelism(value: int, name: str) -> int:
    """``value`` if a positive integer within :func:`parallelism_limit`, else a ``SpanInputError`` naming ``name``."""
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
    """Set torch's intra-op threads to ``threads`` (or ``SLICE_ST_THREADS``; neither: unchanged); returns the count."""
    threads = check_parallelism(int(threads), "threads") if threads else _env_threads()
    if threads:
        torch.set_num_threads(threads)
    return torch.get_num_threads()


class _Runner(torch.nn.Module):
    """``Transformer.model`` for a non-torch backend: no parameters (``to``/``eval`` are no-ops), the transformer's
    ``config``; ``forward`` returns ``last_hidden_state`` (float32)."""

    backend = "torch"
    device = torch.device("cpu")
    dtype = torch.float32

    def __init__(self, config, path: str) -> None:
        super().__init__()
        self.config, self.path = config, str(path)
        self.input_names: list[str] = []

    def forward(self, input_ids=None, attention_mask=None, token_type_ids=None, **_: Any):
        from transformers.modeling_outputs import BaseModelOutput

        token_type_ids = torch.zeros_like(input_ids) if token_type_ids is None else token_type_ids
        features = dict(
            input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
        )
        missing = [name for name in self.input_names if features.get(name) is None]
        if missing:
            raise SpanInputError(f"The {self.backend} model needs the input {missing[0]!r}.")
        inputs = {
            name: features[name].detach().cpu().numpy().astype("int64", copy=False)
            for name in self.input_names
        }
        hidden = torch.from_numpy(self._run(inputs)).float()  # no copy when float32 already
        return BaseModelOutput(last_hidden_state=hidden.to(input_ids.device))

    def save_pretrained(self, *_: Any, **__: Any) -> None:
        raise NotImplementedError(
            f"A model running on {self.backend} cannot be saved: save the torch model, then export it "
            "(slice_st.export_model / slice-st export)."
        )

    def extra_repr(self) -> str:
        return f"backend={self.backend!r}, path={self.path!r}"


class OnnxEncoder(_Runner):
    """An ONNX file run by ONNX Runtime on the CPU."""

    backend = "onnx"

    def __init__(self, config, path: str, threads: int | None = None) -> None:
        super().__init__(config, path)
        import onnxruntime as ort

        # sequential, all graph optimizations: ONNX Runtime's defaults
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads or default_threads()
        # Busy-waiting worker threads steal a shared core from the thread doing the work.
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self.session = ort.InferenceSession(
            str(path), sess_options=options, providers=["CPUExecutionProvider"]
        )
        self.input_names = [item.name for item in self.session.get_inputs()]
        self.output_name = self.session.get_outputs()[0].name

    def _run(self, inputs):
        return self.session.run([self.output_name], inputs)[0]


class OpenVINOEncoder(_Runner):
    """An OpenVINO IR (``.xml`` + ``.bin``) or ONNX file compiled by OpenVINO for the CPU, inferring in ``dtype``:
    float32 by default (OpenVINO would pick bf16 on CPUs with AMX or AVX512-BF16), bfloat16 or float16."""

    backend = "openvino"

    def __init__(self, config, path: str, threads: int | None = None, dtype=None) -> None:
        super().__init__(config, path)
        import openvino as ov

        precision = {torch.float16: "f16", torch.bfloat16: "bf16"}.get(dtype, "f32")
        properties = {
            "INFERENCE_NUM_THREADS": threads or default_threads(),
            "PERFORMANCE_HINT": "LATENCY",
        }
        properties |= {"NUM_STREAMS": 1, "INFERENCE_PRECISION_HINT": precision}
        self.compiled = ov.Core().compile_model(str(path), "CPU", properties)
        self.request = self.compiled.create_infer_request()
        self.input_names = [next(iter(port.get_names())) for port in self.compiled.inputs]
        self.output = self.compiled.outputs[0]

    def _run(self, inputs):
        return self.request.infer(inputs)[self.output].copy()


def runner_of(model: SentenceTransformer) -> _Runner | None:
    """The ONNX Runtime / OpenVINO runner inside ``model`` (``None`` on torch)."""
    try:
        inners = [getattr(module, "model", None) for module in model]
    except TypeError:  # not a module list
        return None
    return next((inner for inner in inners if isinstance(inner, _Runner)), None)


def weight_files(model: SentenceTransformer) -> list[Path]:
    """The files a non-torch model runs from (an OpenVINO ``.xml`` with its ``.bin``), also for one loaded by
    sentence-transformers' own ``backend=...`` (optimum's ``model_path``)."""
    try:
        inner = runner_of(model) or getattr(model[0], "model", None)
    except (TypeError, IndexError):
        return []
    path = Path(getattr(inner, "model_path", None) or getattr(inner, "path", None) or "")
    files = [path, path.with_suffix(".bin")] if path.suffix == ".xml" else [path]
    return [file for file in files if file.is_file()] if path.is_file() else []


def backend_of(model: SentenceTransformer) -> str:
    """Where the model's forward pass runs: ``"torch"``, ``"onnx"`` or ``"openvino"`` (ST's own ``backend=`` too)."""
    runner = runner_of(model)
    return (
        runner.backend if runner is not None else str(getattr(model, "backend", "torch") or "torch")
    )


def attach_runtime(
    model: SentenceTransformer,
    backend: str,
    path: str | os.PathLike,
    threads: int | None = None,
    dtype: torch.dtype | None = None,
):
    """Run ``model``'s transformer on ``backend`` from the exported file ``path`` (the torch one is dropped); ``dtype``:
    OpenVINO's inference precision."""
    module = model[0]
    config = getattr(getattr(module, "model", None), "config", None)
    if config is None:
        raise SpanInputError("The model's first module has no Hugging Face transformer to replace.")
    if backend == "onnx":
        module.model = OnnxEncoder(config, str(path), threads)
    else:
        module.model = OpenVINOEncoder(config, str(path), threads, dtype)
    module.backend = model.backend = backend
    return model


def model_file_for(
    folder: str | os.PathLike,
    backend: str,
    model_file: str | None = None,
    quantized: bool | str = False,
) -> Path | None:
    """The exported file to load from ``folder``, ``None`` if there is none yet: ``model_file`` (relative to
    ``folder``), or with ``quantized`` ``onnx/model_qint8_<config>.onnx`` (``True``: this CPU's config first)."""
    folder = Path(folder)
    files = [folder / (model_file or DEFAULT_FILES[backend])]  # an absolute model_file stays itself
    if quantized and not model_file:
        config = quantized if isinstance(quantized, str) else cpu_quantization_config()
        files = [
            folder / f"onnx/model_qint8_{config}.onnx",
            *sorted((folder / "onnx").glob("model_qint8_*.onnx")),
        ]
    return next((file for file in files if file.is_file()), None)


def cpu_quantization_config() -> str:
    """The dynamic-int8 setting for this CPU: ``avx512_vnni``, ``avx512``, ``avx2`` or ``arm64``."""
    if platform.machine().lower() in ("arm64", "aarch64"):
        return "arm64"
    try:
        flags = Path("/proc/cpuinfo").read_text(errors="ignore")
    except OSError:  # not Linux
        flags = ""
    return "avx512_vnni" if "avx512_vnni" in flags else "avx512" if "avx512f" in flags else "avx2"


class _Encoder(torch.nn.Module):
    """The transformer as a function of plain tensors → ``last_hidden_state`` (what is exported)."""

    def __init__(self, inner: torch.nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, input_ids, attention_mask, token_type_ids=None):
        inputs = dict(input_ids=input_ids, attention_mask=attention_mask)
        if token_type_ids is not None:
            inputs["token_type_ids"] = token_type_ids
        return self.inner(**inputs, return_dict=True).last_hidden_state


def export_onnx(model: SentenceTransformer, path: str | os.PathLike) -> Path:
    """Export the transformer of a torch ``model`` to the ONNX file ``path`` (dynamic batch and sequence length; the
    ``torch.export`` exporter: the TorchScript one traces transformers 5's masks wrongly)."""
    example = model.tokenizer(
        ["An example sentence to export.", "Two words"], padding=True, return_tensors="pt"
    )
    names = [name for name in ("input_ids", "attention_mask", "token_type_ids") if name in example]
    wrapper = _Encoder(model[0].model).eval().float().cpu()
    batch, sequence = torch.export.Dim("batch"), torch.export.Dim("sequence")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with torch.no_grad(), warnings.catch_warnings():
        # shared axes
        warnings.filterwarnings("ignore", message=r".*(axis name|LeafSpec)", category=Warning)
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


def quantize_onnx(
    source: str | os.PathLike, target: str | os.PathLike, config: str = "avx512_vnni"
) -> Path:
    """Dynamic int8 quantization of an ONNX file's matrix products for a CPU (:data:`QUANTIZATION_CONFIGS`)."""
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from onnxruntime.quantization.shape_inference import quant_pre_process

    target = Path(target)
    prepared = target.with_name(target.stem + ".prep.onnx")
    try:
        quant_pre_process(str(source), str(prepared), skip_symbolic_shape=True)
        quantize_dynamic(
            str(prepared),
            str(target),
            weight_type=QuantType.QInt8,
            # nearly all of a BERT's time; embeddings stay float
            op_types_to_quantize=["MatMul", "Gemm"],
            per_channel=True,
            reduce_range=QUANTIZATION_CONFIGS[config],
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
