"""``slice-st export``: a model exported for ONNX Runtime or OpenVINO (offline), into a folder you choose."""

from __future__ import annotations

import time

from slice_st.cli.common import add_command, pick


def add_commands(commands) -> None:
    about = "export a model for ONNX Runtime / OpenVINO (int8 too), offline"
    export = add_command(commands, "export", about, _export, "--output")
    export.add_argument(
        "model", nargs="?", help="model id or path (default: slice-minilm; base: all-MiniLM-L6-v2)"
    )
    export.add_argument("--backend", choices=("onnx", "openvino"), default="onnx")
    quantize = "ONNX dynamic int8; CONFIG: avx512_vnni, avx512, avx2 or arm64 (default: this CPU's)"
    export.add_argument("--quantize", nargs="?", const=True, metavar="CONFIG", help=quantize)
    export.add_argument(
        "--overwrite", action="store_true", help="export again even if the file exists"
    )


def _export(args) -> int:
    import slice_st

    start = time.perf_counter()
    path = slice_st.export_model(
        args.model, args.output, **pick(args, "backend", "quantize", "overwrite")
    )
    flag, keyword = (" --quantized", ", quantized=True") if args.quantize else ("", "")
    print(f"{path} ({time.perf_counter() - start:.1f} s)")
    print(
        f"use it: slice-st mine --model {args.output} --backend {args.backend}{flag} ...   "
        f"or slice_st.load_model({args.output!r}, backend={args.backend!r}{keyword})"
    )
    return 0
