#!/usr/bin/env bash
# Run the slice_st benchmarks with their defaults and keep the output in benchmarks/results/ (git-ignored).
#
#   benchmarks/run_all.sh                                   # defaults (~5-15 min on 2 quiet cores)
#   P1_ARGS="--n-passages 256" P2_ARGS="--extrapolate" benchmarks/run_all.sh   (P3_ARGS, P4_ARGS likewise)
#   BACKENDS_ARGS="--dev ../shared/data/stsb_context/stsb-context-dev.tsv" benchmarks/run_all.sh   (THREADS_ARGS, RAY_ARGS, SERVE_ARGS likewise)
#
# bench_backends and bench_threads export the model once into $EXPORT_DIR (default runs/export/minilm,
# git-ignored; needs the onnx and openvino extras, which `make install` installs).
#
# PYTHON overrides the interpreter (default: the repo's .venv). Each script's exit status is reported;
# bench_single_vs_ngram exits 2 when its pilot predicts the full n-gram baseline would exceed
# --max-minutes (re-run it with --extrapolate or a smaller --n-passages).
set -u -o pipefail
cd "$(dirname "$0")/.."
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
PYTHON=${PYTHON:-.venv/bin/python}
EXPORT_DIR=${EXPORT_DIR:-runs/export/minilm}
mkdir -p benchmarks/results
stamp=$(date +%Y%m%d-%H%M%S)
status=0
for name in bench_best_span_overhead bench_single_vs_ngram bench_loss_step bench_eval_single_pass bench_distill_step bench_backends bench_threads bench_ray bench_serve; do
    case $name in
        bench_best_span_overhead) args=${P1_ARGS:-} ;;
        bench_single_vs_ngram) args=${P2_ARGS:-} ;;
        bench_loss_step) args=${P3_ARGS:-} ;;
        bench_eval_single_pass) args=${P4_ARGS:---dev ${DATA:-../shared/data}/stsb_context/stsb-context-dev.tsv --threads 1} ;;
        bench_distill_step) args=${P7_ARGS:-} ;;
        bench_backends) args="--export-dir $EXPORT_DIR ${BACKENDS_ARGS:-}" ;;
        bench_threads) args="--export-dir $EXPORT_DIR ${THREADS_ARGS:-}" ;;
        bench_ray) args=${RAY_ARGS:-} ;;
        bench_serve) args=${SERVE_ARGS:-} ;;
    esac
    out=benchmarks/results/$stamp-$name.txt
    echo ">>> $PYTHON benchmarks/$name.py $args  (output: $out)"
    # shellcheck disable=SC2086
    "$PYTHON" benchmarks/$name.py $args 2>&1 | grep --line-buffered -v -e "Loading weights" | tee "$out"
    rc=${PIPESTATUS[0]}
    echo ">>> $name exited with status $rc"
    [ "$rc" -eq 0 ] || status=$rc
done
exit $status
