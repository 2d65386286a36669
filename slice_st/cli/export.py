"""``slice-st export``: a model exported for ONNX Runtime or OpenVINO (offline), into a folder you choose.

slice-st export -o runs/export/minilm                         # the default model → onnx/model.onnx
slice-st export -o runs/export/minilm --quantize              # + onnx/model_qint8_<this CPU>.onnx
slice-st export -o runs/export/minilm --backend openvino      # + openvino/openvino_model.xml
"""

from __future__ import annotations

import sys
import time

from slice_st.cli.common import add_command


def add_commands(commands) -> None:
    export = add_command(commands, "export", "export a model for ONNX Runtime / OpenVINO (int8 too), offline", _export)
    export.add_argument("model", nargs="?", help="model id or path (default: slice-minilm; base: all-MiniLM-L6-v2)")
    export.add_argument("-o", "--output", required=True, metavar="DIR", help="folder for the model and its exports")
    export.add_argument("--backend", choices=("onnx", "openvino"), default="onnx")
    quantize = "ONNX dynamic int8; CONFIG: avx512_vnni, avx512, avx2 or arm64 (default: this CPU's)"
    export.add_argument("--quantize", nargs="?", const=True, metavar="CONFIG", help=quantize)
    export.add_argument("--overwrite", action="store_true", help="export again even if the file exists")


def _export(args) -> int:
    import slice_st

    start = time.perf_counter()
    path = slice_st.export_model(
        args.model, args.output, backend=args.backend, quantize=args.quantize, overwrite=args.overwrite
    )
    quantized = (" --quantized", ", quantized=True") if args.quantize else ("", "")
    sys.stdout.write(
        f"{path} ({time.perf_counter() - start:.1f} s)\nuse it: slice-st mine --model {args.output} --backend "
        f"{args.backend}{quantized[0]} ...   or slice_st.load_model({args.output!r}, backend={args.backend!r}"
        f"{quantized[1]})\n"
    )
    return 0
