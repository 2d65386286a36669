"""``STSBContext``: the STS-B-Context phrase-in-context task for mteb 2, scored by best span.

From Python (mteb's public API; :func:`mteb_model` gives the model a proper name and revision, so that
results are not filed under ``no_model_name_available/no_revision_available``)::

    import mteb
    from slice_st import load_model
    from slice_st.integrations.mteb import STSBContext, mteb_model

    task = STSBContext("runs/dev/stsb-context-dev.tsv")       # or a URL; or set SLICE_ST_STSB_CONTEXT
    results = mteb.evaluate(mteb_model(load_model()), [task], cache=mteb.ResultCache("results"))

From the command line (builds the task, calls ``mteb.evaluate``)::

    slice-st mteb run -t STSBContext -m path/to/model --stsb-context runs/dev/stsb-context-dev.tsv --output-folder
    results

A pair's score is the best cosine between the origin phrase (``line``) and any span of 1..20 words of
the passage, from one forward pass per passage (:func:`slice_st.encode.best_spans_paired`); the main score
is the Spearman correlation with ``goldsim``. The full-context cosine (one vector per passage) is
reported alongside as ``full_context_cosine_*``.
"""

from __future__ import annotations

import hashlib
import logging
import os
from typing import Any

from slice_st.errors import FileAccessError
from slice_st.text import check_creatable, require

require("mteb", "eval", "the STSBContext mteb task")

from mteb.abstasks.sts import AbsTaskSTS  # noqa: E402
from mteb.abstasks.task_metadata import TaskMetadata  # noqa: E402

from slice_st.data.stsb import SOURCE_SUFFIX, read_source_note  # noqa: E402

__all__ = [
    "STSBContext",
    "mteb_model",
    "run_mteb",
]

logger = logging.getLogger(__name__)

#: Environment variable naming the STS-B-Context TSV when the task is built without a path.
DATA_ENV = "SLICE_ST_STSB_CONTEXT"
#: What a file in the STS-B-Context format can be: ``(description, mteb sample_creation)``.
SOURCES = {
    "released": (
        "the released STS-B-Context (Orbach et al., 2024): each passage was written by a language model (GPT-3.5) "
        "around "
        "the STS-B sentence",
        "LM-generated and verified",
    ),
    "make-context": (
        "a proxy built by `slice-st make-context`: each passage is the STS-B sentence glued among other STS-B "
        "sentences (no language model), which makes it easier than the released set",
        "created",
    ),
    "unknown": (
        "a file in the STS-B-Context format whose origin is not recorded (the released set's passages were written "
        "by a language model; `slice-st make-context` glues STS-B sentences)",
        "found",
    ),
}

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


#: The splits an STS-B-Context file can be (results are filed under it).
SPLITS = ("dev", "test", "train")


def infer_split(path: str | os.PathLike | None) -> str:
    """The STS-B split a file holds: ``dev``/``train`` when its name (or the STS-B file its note records) says so, else
    ``test``.

    >>> infer_split("runs/stsb-context-dev.tsv"), infer_split("sts-train.csv"), infer_split("released.tsv")
    ('dev', 'train', 'test')
    """
    import json
    import re

    names = [os.path.basename(os.fspath(path))] if path else []
    if path and os.path.isfile(os.fspath(path) + SOURCE_SUFFIX):
        try:
            with open(os.fspath(path) + SOURCE_SUFFIX, encoding="utf-8") as handle:
                names.insert(0, str(json.load(handle).get("stsb_file") or ""))
        except (OSError, ValueError, AttributeError):
            pass
    for name in names:
        words = set(re.split(r"[^a-z]+", name.lower()))
        if words & {"dev", "validation", "val"}:
            return "dev"
        if "train" in words:
            return "train"
        if "test" in words:
            return "test"
    return "test"


class STSBContext(AbsTaskSTS):
    """STS-B-Context (Orbach et al., 2024) as an mteb STS task whose passages are scored by best span.

    ``path`` is the TSV in the public STS-B-Context format (the released set, or a set built by
    ``slice-st make-context``), a local path or URL; without it the ``SLICE_ST_STSB_CONTEXT``
    environment variable is used. ``source`` says what the file is (``"released"``,
    ``"make-context"``, ``"unknown"``; default: the note ``make-context`` writes beside its output, else
    ``"unknown"``); the task's metadata (description, ``sample_creation``) says so. ``limit`` keeps a
    seeded sample of that many pairs (``seed``). ``min_span``/``max_span``/``unit`` set the spans
    (default 1..20 words, the paper's setting). The model must be a sentence-transformers model (span
    scoring needs its token vectors).

    Args:
        path: The TSV, a local path or URL (``None``: ``SLICE_ST_STSB_CONTEXT``).
        source: ``"released"``, ``"make-context"`` or ``"unknown"`` (``None``: the note beside the file, else unknown).
        limit: Keep a seeded sample of that many pairs.
        seed: Seed of the sample.
        min_span: Shortest span, in units.
        max_span: Longest span, in units.
        unit: ``"word"`` or ``"token"``.
        missing_paraphrase: As in :func:`slice_st.data.read_stsb_context`.
        **kwargs: Passed to mteb's ``AbsTaskSTS``.
    """

    min_score = 0
    max_score = 5
    column_names = ("sentence1", "sentence2")

    metadata = TaskMetadata(
        name="STSBContext",
        dataset={"path": "local:STS-B-Context", "revision": "local"},
        description=(
            "STS-B-Context: STS benchmark pairs whose second sentence sits verbatim inside a longer passage. The "
            "score of a pair "
            "is the best similarity between the origin phrase and any 1..20-word span of the passage (phrase mining "
            "in context). "
            "Read from a local TSV or URL: " + SOURCES["unknown"][0] + "."
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
        sample_creation=SOURCES["unknown"][1],
        bibtex_citation=_CITATION,
        adapted_from=["STSBenchmark"],
    )

    def __init__(
        self,
        path: str | os.PathLike | None = None,
        *,
        source: str | None = None,
        limit: int | None = None,
        seed: int = 0,
        min_span: int = 1,
        max_span: int = 20,
        unit: str = "word",
        missing_paraphrase: str = "warn",
        split: str | None = None,
        **kwargs: Any,
    ) -> None:
        from slice_st.spans import check_span_bounds
        from slice_st.tokens import check_unit

        check_span_bounds(min_span, max_span)
        self.min_span, self.max_span, self.unit = min_span, max_span, check_unit(unit)
        self.missing_paraphrase = missing_paraphrase
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 4):
            raise ValueError(f"limit must be an integer >= 4 (correlations need 4 pairs), got {limit!r}.")
        self.limit, self.seed = limit, seed
        self.path = os.fspath(path) if path is not None else os.environ.get(DATA_ENV)
        self.source = source if source is not None else (read_source_note(self.path) or "unknown")
        if self.source not in SOURCES:
            raise ValueError(f"source must be one of {sorted(SOURCES)}, got {self.source!r}.")
        super().__init__(**kwargs)
        self.split = split if split is not None else infer_split(self.path)
        if self.split not in SPLITS:
            raise ValueError(f"split must be one of {SPLITS}, got {self.split!r}.")
        what, creation = SOURCES[self.source]
        update: dict[str, Any] = {
            "description": self.metadata.description.split("Read from a local TSV or URL: ")[0]
            + f"Read from a local TSV or URL: {what}.",
            "sample_creation": creation,
            "eval_splits": [self.split],
        }
        if self.path and os.path.isfile(self.path):
            with open(self.path, "rb") as handle:
                revision = hashlib.sha1(handle.read()).hexdigest()[:12]
            if limit is not None:
                revision += f"-limit{limit}-seed{seed}"
            # Results are cached per dataset revision: a different file (or sample) is a different revision.
            update["dataset"] = {"path": os.path.basename(self.path), "revision": revision}
        self.metadata = self.metadata.model_copy(update=update)

    def load_data(self, num_proc: int | None = None, *, timer=None, **kwargs: Any) -> None:
        """Read the TSV (validated; see :func:`slice_st.data.read_stsb_context`) as the task's split (``dev``,
        ``test``, ``train``)."""
        if self.data_loaded:
            return
        datasets = require("datasets", "eval", "the STSBContext mteb task")

        from slice_st.data.stsb import read_stsb_context

        if not self.path:
            raise FileNotFoundError(
                f"STSBContext needs the STS-B-Context TSV: pass STSBContext(path=...), set {DATA_ENV}=FILE, "
                "or give `--stsb-context FILE` to `slice-st mteb run`."
            )
        data = read_stsb_context(self.path, missing_paraphrase=self.missing_paraphrase)
        if self.limit is not None:
            from slice_st.evaluation.statistics import subset_indices

            data = data.select(subset_indices(len(data), self.limit, self.seed))
        split = datasets.Dataset.from_dict(
            {
                "sentence1": data["line"],
                "sentence2": data["passage"],
                "score": data["goldsim"],
                "paraphrase": data["paraphrase"],
            }
        )
        self.dataset = {"default": datasets.DatasetDict({self.split: split})}
        self.data_loaded = True

    def _evaluate_subset(
        self,
        model,
        data_split,
        *,
        encode_kwargs,
        hf_split,
        hf_subset,
        prediction_folder=None,
        num_proc=None,
        timer=None,
        **kwargs: Any,
    ) -> dict[str, float]:
        from slice_st.evaluation.localisation import span_localisation
        from slice_st.evaluation.setups import score_full, score_single
        from slice_st.evaluation.statistics import correlations
        from slice_st.scoring import DEFAULT_SCORER

        st_model = _sentence_transformer(model)
        batch_size = int(encode_kwargs.get("batch_size", 32))
        phrases, passages = list(data_split["sentence1"]), list(data_split["sentence2"])
        gold = [self._normalize(x) for x in data_split["score"]]
        span_kwargs = dict(
            min_span=self.min_span,
            max_span=self.max_span,
            unit=self.unit,
            batch_size=batch_size,
            show_progress_bar=bool(encode_kwargs.get("show_progress_bar", False)),
        )
        single = score_single(st_model, phrases, passages, scorer=DEFAULT_SCORER, **span_kwargs)
        paper = score_single(st_model, phrases, passages, scorer="max-cosine", **span_kwargs)  # the paper's protocol
        full = score_full(st_model, phrases, passages, batch_size=batch_size)
        pearson, spearman = correlations(gold, single.scores)
        paper_pearson, paper_spearman = correlations(gold, paper.scores)
        full_pearson, full_spearman = correlations(gold, full.scores)
        where: dict[str, float] = {}
        if "paraphrase" in getattr(data_split, "column_names", ()):
            raw_gold = [float(x) for x in data_split["score"]]
            for name, result in (("", single), ("max_cosine_", paper)):
                found = span_localisation(passages, result.spans, list(data_split["paraphrase"]), raw_gold)
                where |= {f"{name}{key}": found[key] for key in ("exact", "word_f1", "strong_exact", "strong_word_f1")}
        if prediction_folder:
            self._save_task_predictions(
                {
                    "best_span_scores": single.scores.tolist(),
                    "best_spans": [list(s) if s else None for s in single.spans],
                    "full_context_scores": full.scores.tolist(),
                },
                model,
                prediction_folder,
                hf_subset=hf_subset,
                hf_split=hf_split,
            )
        return {
            "pearson": pearson,
            "spearman": spearman,
            "cosine_pearson": pearson,
            "cosine_spearman": spearman,
            "max_cosine_pearson": paper_pearson,
            "max_cosine_spearman": paper_spearman,
            "full_context_cosine_pearson": full_pearson,
            "full_context_cosine_spearman": full_spearman,
            "min_span": self.min_span,
            "max_span": self.max_span,
            "pairs": len(gold),
            **where,
        }


def _sentence_transformer(model):
    """The ``SentenceTransformer`` behind an mteb model wrapper (or the model itself)."""
    from sentence_transformers import SentenceTransformer

    for candidate in (model, getattr(model, "model", None)):
        if isinstance(candidate, SentenceTransformer):
            return candidate
    raise TypeError(
        f"STSBContext scores spans from token vectors, so it needs a sentence-transformers model; got "
        f"{type(model).__name__}."
    )


# ------------------------------------------------------------------------------------- models
#: The licence of the embedded base model (sentence-transformers/all-MiniLM-L6-v2).
BASE_LICENCE = "apache-2.0"


def mteb_model(model, name: str | None = None, revision: str | None = None):
    """``model`` wrapped for ``mteb.evaluate`` with a proper name and revision (mteb's public
    ``SentenceTransformerEncoderWrapper`` and ``ModelMeta``).

    The meta also carries the number of parameters, the licence (the model card's; the embedded base is
    Apache-2.0, the shipped ``slice-minilm`` CC BY-NC-SA 4.0) and ``adapted_from`` (the card's base model).

    Name: the model's Hub id (the embedded base: ``sentence-transformers/all-MiniLM-L6-v2``; a model shipped
    in slice-st: ``slice-st/slice-minilm``), or ``local/<folder>`` for a local model (``local/runA-final``). Revision:
    the Hub revision when known,
    else the fingerprint of the weights, so results of different weights never share a folder.
    """
    from mteb import SentenceTransformerEncoderWrapper

    from slice_st.loading import DEFAULT_MODEL_NAME, model_fingerprint, model_identity

    wrapper = SentenceTransformerEncoderWrapper(model)
    identity, path = model_identity(model)
    if name is None:  # mteb wants ORG/NAME
        name = (
            f"local/{identity.replace('/', '-')}" if path else identity if "/" in identity else f"slice-st/{identity}"
        )
    if revision is None:
        revision = getattr(model.model_card_data, "base_model_revision", None) if not path else None
        revision = revision or model_fingerprint(model)
    card = model.model_card_data
    base = getattr(card, "base_model", None)
    licence = getattr(card, "license", None) or (BASE_LICENCE if identity == DEFAULT_MODEL_NAME else "not specified")
    update = {
        "name": name,
        "revision": revision,
        "n_parameters": sum(p.numel() for p in model.parameters()),
        "license": licence,
        "adapted_from": base if base and base != identity else None,
    }
    wrapper.mteb_model_meta = wrapper.mteb_model_meta.model_copy(update=update)
    return wrapper


def run_mteb(
    model_spec: str | None,
    tasks: list[str],
    *,
    stsb_context: str | None = None,
    source: str | None = None,
    limit: int | None = None,
    output_folder: str | None = None,
    model_name: str | None = None,
    revision: str | None = None,
    batch_size: int = 32,
    device: str | None = None,
    overwrite_strategy: str = "only-missing",
    min_span: int = 1,
    max_span: int = 20,
    show_progress_bar: bool = True,
):
    """What ``slice-st mteb run`` does: build the tasks (``STSBContext`` from ``stsb_context``, others by
    ``mteb.get_task``), load the model, and call ``mteb.evaluate``; results go to mteb's
    ``ResultCache(output_folder)`` (``OUTPUT/results/<model>/<revision>/<task>.json``). Returns mteb's result."""
    import mteb

    from slice_st.loading import load_model

    if limit is not None and any(task != "STSBContext" for task in tasks):
        raise ValueError("--limit applies to STSBContext only.")
    built = []
    for task in tasks:
        if task == "STSBContext":
            path = stsb_context or os.environ.get(DATA_ENV)
            if not path:
                raise FileNotFoundError(
                    f"STSBContext needs the STS-B-Context TSV: give --stsb-context FILE (or set {DATA_ENV})."
                )
            if "://" not in path and not os.path.exists(path):
                raise FileNotFoundError(f"--stsb-context: file not found: {path}")
            built.append(STSBContext(path, source=source, limit=limit, min_span=min_span, max_span=max_span))
        else:
            try:
                built.append(mteb.get_task(task))
            except KeyError:
                raise ValueError(f"unknown mteb task {task!r}.") from None
    if output_folder:  # said before the evaluation, not after it
        if os.path.exists(output_folder) and not os.path.isdir(output_folder):
            raise FileAccessError(f"--output-folder {output_folder} is a file, not a folder.")
        check_creatable(os.path.join(output_folder, "results"))
    model = load_model(None if model_spec in (None, "default") else model_spec, device=device)
    cache = mteb.ResultCache(output_folder) if output_folder else None
    try:
        return mteb.evaluate(
            mteb_model(model, model_name, revision),
            built,
            cache=cache,
            overwrite_strategy=overwrite_strategy,
            encode_kwargs={"batch_size": batch_size, "show_progress_bar": show_progress_bar},
            show_progress_bar=show_progress_bar,
            co2_tracker=False,
        )
    except ConnectionError as error:  # a task whose data is on the Hub, offline (HF_HUB_OFFLINE=1) or without a network
        raise FileNotFoundError(
            f"the data of mteb task(s) {', '.join(tasks)} is not available here "
            f"({' '.join(str(error).split())[:200]}): "
            "run once with network access (HF_HUB_OFFLINE unset) to cache it."
        ) from None
