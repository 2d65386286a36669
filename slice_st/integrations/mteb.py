"""``STSBContext``: the STS-B-Context phrase-in-context task for mteb 2, scored by best span.

From Python::

    import mteb
    from slice_st import STSBContext, load_model

    task = STSBContext("runs/dev/stsb-context-dev.tsv")       # or a URL; or set SLICE_ST_STSB_CONTEXT
    results = mteb.evaluate(load_model(), [task], cache=mteb.ResultCache("results"))

From the command line (mteb 2 has no plugin hook for external tasks, so ``mteb run -t STSBContext``
cannot know this class; ``slice-st mteb`` registers it, then hands over to mteb's own CLI)::

    slice-st mteb run -t STSBContext -m path/to/model --stsb-context runs/dev/stsb-context-dev.tsv

A pair's score is the best cosine between the origin phrase (``line``) and any span of 1..20 words of
the passage, from one forward pass per passage (:func:`slice_st.best_spans_paired`); the main score
is the Spearman correlation with ``goldsim``. The full-context cosine (one vector per passage) is
reported alongside as ``full_context_cosine_*``.
"""

from __future__ import annotations

import hashlib
import importlib
import logging
import os
import sys
from collections.abc import Sequence
from typing import Any

from mteb.abstasks.sts import AbsTaskSTS
from mteb.abstasks.task_metadata import TaskMetadata

__all__ = ["STSBContext", "DATA_ENV", "register_tasks", "run_mteb_cli"]

logger = logging.getLogger(__name__)

#: Environment variable naming the STS-B-Context TSV when the task is built without a path (mteb's CLI).
DATA_ENV = "SLICE_ST_STSB_CONTEXT"

_CITATION = r"""
@misc{orbach2024slice,
  archiveprefix = {arXiv},
  author = {Orbach, Eyal and Haikin, Lev and David, Nelly and Faizakof, Avi},
  eprint = {2405.07263},
  primaryclass = {cs.CL},
  title = {Span-Aggregatable, Contextualized Word Embeddings for Effective Phrase Mining},
  url = {https://arxiv.org/abs/2405.07263},
  year = {2024},
}
"""


class STSBContext(AbsTaskSTS):
    """STS-B-Context (Orbach et al., 2024) as an mteb STS task whose passages are scored by best span.

    ``path`` is the TSV in the public STS-B-Context format (or an STS-B-Context-style set from
    ``slice-st make-context``), a local path or URL; without it the ``SLICE_ST_STSB_CONTEXT``
    environment variable is used. ``min_span``/``max_span``/``unit`` set the spans (default 1..20
    words, the paper's setting). The model must be a sentence-transformers model (span scoring needs
    its token vectors).
    """

    min_score = 0
    max_score = 5
    column_names = ("sentence1", "sentence2")

    metadata = TaskMetadata(
        name="STSBContext",
        dataset={"path": "local:STS-B-Context", "revision": "local"},
        description=(
            "STS-B-Context: STS benchmark pairs whose second sentence sits verbatim inside a longer generated passage. "
            "The score of a pair is the best similarity between the origin phrase and any 1..20-word span of the passage "
            "(phrase mining in context). Read from a local TSV or URL (see slice_st.mteb_tasks)."
        ),
        reference="https://arxiv.org/abs/2405.07263",
        type="STS",
        category="t2t",
        modalities=["text"],
        eval_splits=["test"],
        eval_langs=["eng-Latn"],
        main_score="cosine_spearman",
        date=("2024-05-12", "2024-05-12"),
        domains=["News", "Written", "Web"],
        task_subtypes=[],
        # STS-B's scores are CC BY-SA 4.0, its sentences come from sources under various terms, and the
        # STS-B-Context release states no licence for its generated passages.
        license="not specified",
        annotations_creators="human-annotated",
        dialect=[],
        sample_creation="LM-generated and verified",
        bibtex_citation=_CITATION,
        adapted_from=["STSBenchmark"],
    )

    def __init__(self, path: str | os.PathLike | None = None, *, min_span: int = 1, max_span: int = 20, unit: str = "word",
                 missing_paraphrase: str = "warn", **kwargs: Any) -> None:
        from slice_st.spans import check_span_bounds
        from slice_st.tokens import check_unit

        check_span_bounds(min_span, max_span)
        self.min_span, self.max_span, self.unit = min_span, max_span, check_unit(unit)
        self.missing_paraphrase = missing_paraphrase
        self.path = os.fspath(path) if path is not None else os.environ.get(DATA_ENV)
        super().__init__(**kwargs)
        if self.path and os.path.isfile(self.path):
            with open(self.path, "rb") as handle:
                revision = hashlib.sha1(handle.read()).hexdigest()[:12]
            # Results are cached per dataset revision: a different file is a different revision.
            self.metadata = self.metadata.model_copy(update={"dataset": {"path": self.path, "revision": revision}})

    def load_data(self, num_proc: int | None = None, *, timer=None, **kwargs: Any) -> None:
        """Read the TSV (validated; see :func:`slice_st.data.read_stsb_context`) as the ``test`` split."""
        if self.data_loaded:
            return
        import datasets

        from slice_st.data.stsb import read_stsb_context

        if not self.path:
            raise FileNotFoundError(
                f"STSBContext needs the STS-B-Context TSV: pass STSBContext(path=...), set {DATA_ENV}=FILE, "
                "or give `--stsb-context FILE` to `slice-st mteb run`."
            )
        data = read_stsb_context(self.path, missing_paraphrase=self.missing_paraphrase)
        split = datasets.Dataset.from_dict({"sentence1": data["line"], "sentence2": data["passage"], "score": data["goldsim"]})
        self.dataset = {"default": datasets.DatasetDict({"test": split})}
        self.data_loaded = True

    def _evaluate_subset(self, model, data_split, *, encode_kwargs, hf_split, hf_subset, prediction_folder=None,
                         num_proc=None, timer=None, **kwargs: Any) -> dict[str, float]:
        from slice_st.evaluation.setups import score_full, score_single
        from slice_st.evaluation.statistics import correlations

        st_model = _sentence_transformer(model)
        batch_size = int(encode_kwargs.get("batch_size", 32))
        phrases, passages = list(data_split["sentence1"]), list(data_split["sentence2"])
        gold = [self._normalize(x) for x in data_split["score"]]
        single = score_single(st_model, phrases, passages, min_span=self.min_span, max_span=self.max_span, unit=self.unit,
                              batch_size=batch_size, show_progress_bar=bool(encode_kwargs.get("show_progress_bar", False)))
        full = score_full(st_model, phrases, passages, batch_size=batch_size)
        pearson, spearman = correlations(gold, single.scores)
        full_pearson, full_spearman = correlations(gold, full.scores)
        if prediction_folder:
            self._save_task_predictions(
                {"best_span_scores": single.scores.tolist(), "best_spans": [list(s) if s else None for s in single.spans],
                 "full_context_scores": full.scores.tolist()},
                model, prediction_folder, hf_subset=hf_subset, hf_split=hf_split,
            )
        return {
            "pearson": pearson, "spearman": spearman, "cosine_pearson": pearson, "cosine_spearman": spearman,
            "full_context_cosine_pearson": full_pearson, "full_context_cosine_spearman": full_spearman,
            "min_span": self.min_span, "max_span": self.max_span,
        }


def _sentence_transformer(model):
    """The ``SentenceTransformer`` behind an mteb model wrapper (or the model itself)."""
    from sentence_transformers import SentenceTransformer

    for candidate in (model, getattr(model, "model", None)):
        if isinstance(candidate, SentenceTransformer):
            return candidate
    raise TypeError(
        f"STSBContext scores spans from token vectors, so it needs a sentence-transformers model; got {type(model).__name__}."
    )


# ------------------------------------------------------------------------------------- mteb CLI
def register_tasks() -> None:
    """Make ``mteb.get_task("STSBContext")`` / ``mteb.get_tasks(tasks=["STSBContext"])`` find the task.

    mteb 2 builds its task registry from its own ``mteb.tasks`` package at import time and has no
    entry point for external tasks; this adds ours to that registry (idempotent).

    >>> register_tasks()
    >>> import mteb
    >>> type(mteb.get_task("STSBContext")).__name__
    'STSBContext'
    """
    registry_module = importlib.import_module("mteb.get_tasks")
    registry_module._TASKS_REGISTRY.setdefault(STSBContext.metadata.name, STSBContext)
    if STSBContext not in registry_module.TASK_LIST:
        registry_module.TASK_LIST = (*registry_module.TASK_LIST, STSBContext)


def _local_model_loader(original):
    """Wrap ``mteb.get_model`` so that local folders (and ``default``) load through sentence-transformers."""

    def get_model(model_name: str, revision: str | None = None, device: str | int | None = None, **kwargs: Any):
        from mteb.models.sentence_transformer_wrapper import SentenceTransformerEncoderWrapper

        from slice_st.config import load_model

        path = os.path.expanduser(model_name)
        if model_name != "default" and not os.path.isdir(path):
            return original(model_name, revision, device=device, **kwargs)
        if isinstance(device, int):
            device = f"cuda:{device}"
        model = load_model(None if model_name == "default" else path, device=device)
        wrapper = SentenceTransformerEncoderWrapper(model)
        name = "sentence-transformers/all-MiniLM-L6-v2" if model_name == "default" else f"local/{os.path.basename(os.path.abspath(path))}"
        meta = wrapper.mteb_model_meta
        if not meta.name or meta.name.startswith("no_model_name"):
            meta = meta.model_copy(update={"name": name})
        if not meta.revision or meta.revision.startswith("no_revision"):
            meta = meta.model_copy(update={"revision": "local"})
        wrapper.mteb_model_meta = meta
        return wrapper

    get_model.__wrapped__ = original  # type: ignore[attr-defined]
    return get_model


def _pop_option(argv: list[str], flag: str) -> str | None:
    """Remove ``flag VALUE`` or ``flag=VALUE`` from ``argv``; return VALUE."""
    for position, item in enumerate(argv):
        if item == flag:
            if position + 1 >= len(argv):
                raise ValueError(f"{flag} needs a value.")
            value = argv[position + 1]
            del argv[position : position + 2]
            return value
        if item.startswith(flag + "="):
            del argv[position]
            return item.split("=", 1)[1]
    return None


def run_mteb_cli(argv: Sequence[str]) -> int:
    """Run mteb's own CLI with ``STSBContext`` registered and local model folders accepted.

    Extra option read here: ``--stsb-context FILE`` (sets ``SLICE_ST_STSB_CONTEXT``). Everything
    else goes to mteb unchanged, so results land in mteb's usual layout under ``--output-folder``.
    """
    import mteb
    from mteb.cli.build_cli import build_cli

    argv = list(argv)
    data = _pop_option(argv, "--stsb-context")
    if data is not None:
        if not os.path.exists(data) and "://" not in data:
            raise FileNotFoundError(f"--stsb-context: file not found: {data}")
        os.environ[DATA_ENV] = data
    register_tasks()
    if not argv or argv[0] in ("-h", "--help"):
        print("usage: slice-st mteb {run,available-tasks,...} [mteb options] [--stsb-context FILE]\n\n"
              "mteb's own command line, with the STSBContext task registered and local model folders accepted\n"
              "(`-m path/to/model`, or `-m default` for the embedded all-MiniLM-L6-v2). mteb's help follows.\n")
        build_cli().print_help()
        return 0
    if not getattr(mteb.get_model, "__wrapped__", None):
        mteb.get_model = _local_model_loader(mteb.get_model)
    parser = build_cli()
    args = parser.parse_args(argv)
    if not hasattr(args, "func"):
        parser.print_help(sys.stderr)
        return 2
    args.func(args)
    return 0
