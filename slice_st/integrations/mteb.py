"""``STSBContext``: the STS-B-Context phrase-in-context task for mteb 2, scored by best span (one forward pass per
passage); ``mteb_model`` names a model for mteb's results, ``run_mteb`` is ``slice-st mteb run``."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import random
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

from slice_st._extras import needs_extra
from slice_st.card import SLICE_CITATION
from slice_st.data.stsb import read_stsb_context
from slice_st.errors import FileAccessError, SpanInputError
from slice_st.evaluation.localisation import LOCALISATION_METRICS, span_localisation
from slice_st.evaluation.span_retrieval import correlations, score_full, score_single
from slice_st.files import check_output
from slice_st.scoring import DEFAULT_SCORER
from slice_st.spans import check_span_bounds
from slice_st.tokens import check_unit

with needs_extra("eval", "the STSBContext mteb task"):
    from mteb.abstasks.sts import AbsTaskSTS
    from mteb.abstasks.task_metadata import TaskMetadata

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

__all__ = ["STSBContext", "mteb_model", "run_mteb"]

#: Environment variable naming the STS-B-Context TSV when the task is built without a path.
DATA_ENV = "SLICE_ST_STSB_CONTEXT"
#: Where a file in the STS-B-Context format comes from → what the task's description says of it.
SOURCES = {
    "released": "the released STS-B-Context: passages written by a language model (GPT-3.5) around the STS-B sentence",
    "make-context": "a make-context proxy: the STS-B sentence glued among other STS-B sentences (easier)",
    "unknown": "a file in the STS-B-Context format whose origin is not recorded",
}
_SAMPLE_CREATION = {
    "released": "LM-generated and verified",
    "make-context": "created",
    "unknown": "found",
}
#: The note beside a TSV that says which of :data:`SOURCES` it is, ``{"source": ...}`` (research.context writes it).
SOURCE_SUFFIX = ".source.json"

#: The one split, whatever the file (STS-B-Context is released as one evaluation set, built on STS-B's test split);
#: which file or sample was scored is the result's ``dataset_revision``.
SPLIT = "test"
#: The revision (SHA-1 of the bytes, 12 digits) of the file the shipped descriptive statistics describe: the dev half
#: of the released STS-B-Context (512 of its 1,024 rows). ``calculate_descriptive_statistics()`` does any other file.
STATS_REVISION = "aaccb8ff467e"
_SHIPPED_STATS = Path(__file__).with_name("stsb_context_stats.json")
_DESCRIPTION = (
    "STS-B-Context: STS benchmark pairs whose second sentence sits verbatim inside a longer passage. The score of a "
    "pair is the best similarity between the origin phrase and any 1..20-word span of the passage (phrase mining in "
    "context). Read from a local TSV or URL: "
)


class _Metadata(TaskMetadata):
    """mteb's ``TaskMetadata`` with descriptive statistics per file (shipped, or beside a local file)."""

    _stats_path: Path | None = None  # a pydantic private attribute, copied by model_copy

    @property
    def descriptive_stat_path(self) -> Path:
        if self._stats_path is None:
            raise SpanInputError(
                f"STSBContext keeps descriptive statistics beside a local file; {self.dataset['path']} is not one "
                "(download it and pass its path)."
            )
        return self._stats_path

    @property
    def descriptive_stats(self):
        return None if self._stats_path is None else super().descriptive_stats


class STSBContext(AbsTaskSTS):
    """STS-B-Context (Orbach et al., 2024) as an mteb STS task whose passages are scored by best span.

    The model must be a sentence-transformers model whose first module is a transformer with a fast tokenizer. The
    data is ``task.dataset["test"]``; the metadata (the file's name, revision and statistics; description and
    ``sample_creation`` from ``source``) is the file's and survives mteb's ``unload_data()``. Besides the best-span
    scores, results carry the paper's max-cosine protocol (``max_cosine_*``), the full-context cosine
    (``full_context_cosine_*``) and where the best span lands (``exact``, ``word_f1``, ``strong_*``).

    Args:
        path: The TSV in the public STS-B-Context format, a local path or URL (``None``: ``SLICE_ST_STSB_CONTEXT``).
        source: ``"released"``, ``"make-context"`` or ``"unknown"`` (``None``: the note beside the file, else unknown).
        limit: Keep a seeded sample of that many pairs.
        seed: Seed of the sample.
        min_span: Shortest span, in units.
        max_span: Longest span, in units.
        unit: ``"word"`` or ``"token"``.
        missing_paraphrase: As in :func:`slice_st.data.read_stsb_context`.

    Example: ``mteb.evaluate(mteb_model(load_model()), [STSBContext("dev.tsv")], cache=mteb.ResultCache("results"))``.
    """

    min_score = 0
    max_score = 5
    column_names = ("sentence1", "sentence2")

    metadata = _Metadata(
        name="STSBContext",
        dataset={"path": "STS-B-Context", "revision": STATS_REVISION},
        description=_DESCRIPTION + SOURCES["unknown"] + ".",
        reference="https://arxiv.org/abs/2405.07263",
        type="STS",
        category="t2t",
        modalities=["text"],
        eval_splits=[SPLIT],
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
        sample_creation=_SAMPLE_CREATION["unknown"],
        bibtex_citation=SLICE_CITATION,
        adapted_from=["STSBenchmark"],
    )
    metadata._stats_path = _SHIPPED_STATS

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
    ) -> None:
        check_span_bounds(min_span, max_span)
        self.min_span, self.max_span, self.unit = min_span, max_span, check_unit(unit)
        if limit is not None and (
            isinstance(limit, bool) or not isinstance(limit, int) or limit < 4
        ):
            raise SpanInputError(
                f"limit must be an integer >= 4 (correlations need 4 pairs), got {limit!r}."
            )
        self.limit, self.seed, self.missing_paraphrase = limit, seed, missing_paraphrase
        self.path = os.fspath(path) if path is not None else os.environ.get(DATA_ENV)
        self.source = source if source is not None else _noted_source(self.path)
        if self.source not in SOURCES:
            raise SpanInputError(f"source must be one of {sorted(SOURCES)}, got {self.source!r}.")
        super().__init__()
        update: dict[str, Any] = {"description": _DESCRIPTION + SOURCES[self.source] + "."}
        update["sample_creation"] = _SAMPLE_CREATION[self.source]
        stats_path = None
        if self.path and os.path.isfile(self.path):
            revision = hashlib.sha1(Path(self.path).read_bytes()).hexdigest()[:12]
            revision += f"-limit{limit}-seed{seed}" if limit is not None else ""
            # The file's identity in results (mteb's dataset_revision): a different file or sample, another revision.
            update["dataset"] = {"path": os.path.basename(self.path), "revision": revision}
            stats_path = Path(f"{self.path}.stats-{revision}.json")
            if revision == STATS_REVISION:
                stats_path = _SHIPPED_STATS
        elif self.path:
            update["dataset"] = {"path": self.path, "revision": "unknown"}
        metadata = self.metadata.model_copy(update=update)
        metadata._stats_path = stats_path
        # The file's own metadata, which mteb's unload_data() would otherwise swap for the class's.
        self.metadata = self._file_metadata = metadata

    def unload_data(self) -> None:
        """Free the data (mteb's ``unload_data``), keeping the metadata of the task's own file to evaluate again."""
        super().unload_data()
        self.metadata = self._file_metadata

    def load_data(self, num_proc: int | None = None, *, timer=None, **kwargs: Any) -> None:
        """Read the TSV (:func:`slice_st.data.read_stsb_context`) as the task's one split, ``task.dataset["test"]``."""
        if self.data_loaded:
            return
        with needs_extra("eval", "the STSBContext mteb task"):
            import datasets
        if not self.path:
            raise FileNotFoundError(
                f"STSBContext needs the STS-B-Context TSV: pass its path or set {DATA_ENV}=FILE."
            )
        data = read_stsb_context(self.path, missing_paraphrase=self.missing_paraphrase)
        if self.limit is not None and self.limit < len(data):
            data = data.select(
                sorted(random.Random(self.seed).sample(range(len(data)), self.limit))
            )
        columns = {"sentence1": "line", "sentence2": "passage", "score": "goldsim"}
        columns["paraphrase"] = "paraphrase"
        split = datasets.Dataset.from_dict({name: data[column] for name, column in columns.items()})
        self.dataset = datasets.DatasetDict({SPLIT: split})
        self.data_loaded = True

    def _evaluate_subset(
        self,
        model: Any,
        data_split,
        *,
        encode_kwargs,
        hf_split,
        hf_subset,
        prediction_folder=None,
        **kwargs: Any,
    ) -> dict[str, float]:
        st_model = _sentence_transformer(model)
        batch_size = int(encode_kwargs.get("batch_size", 32))
        phrases, passages = list(data_split["sentence1"]), list(data_split["sentence2"])
        gold = [self._normalize(x) for x in data_split["score"]]
        spans = {"min_span": self.min_span, "max_span": self.max_span, "unit": self.unit}
        spans["show_progress_bar"] = bool(encode_kwargs.get("show_progress_bar", False))
        spans["batch_size"] = batch_size
        single = score_single(st_model, phrases, passages, scorer=DEFAULT_SCORER, **spans)
        # the paper's protocol
        paper = score_single(st_model, phrases, passages, scorer="max-cosine", **spans)
        full = score_full(st_model, phrases, passages, batch_size=batch_size)
        scores: dict[str, Any] = {"min_span": self.min_span, "max_span": self.max_span}
        scores["pairs"] = len(gold)
        setups = {"": single, "cosine_": single, "max_cosine_": paper, "full_context_cosine_": full}
        for name, result in setups.items():
            scores[f"{name}pearson"], scores[f"{name}spearman"] = correlations(gold, result.scores)
        if "paraphrase" in getattr(data_split, "column_names", ()):
            raw_gold = [float(x) for x in data_split["score"]]
            paraphrases = list(data_split["paraphrase"])
            for name, result in (("", single), ("max_cosine_", paper)):
                found = span_localisation(passages, result.spans, paraphrases, raw_gold)
                scores |= {f"{name}{key}": found[key] for key in LOCALISATION_METRICS}
        if prediction_folder:
            predictions = {
                "best_span_scores": single.scores.tolist(),
                "full_context_scores": full.scores.tolist(),
            }
            predictions["best_spans"] = [list(span) if span else None for span in single.spans]
            self._save_task_predictions(
                predictions, model, prediction_folder, hf_subset=hf_subset, hf_split=hf_split
            )
        return scores


def _noted_source(path: str | None) -> str:
    try:
        with open(f"{path}{SOURCE_SUFFIX}", encoding="utf-8") as handle:
            source = json.load(handle).get("source")
    except (OSError, ValueError, AttributeError):
        return "unknown"
    return source if source in SOURCES else "unknown"


def _sentence_transformer(model: Any) -> SentenceTransformer:
    """The ``SentenceTransformer`` behind an mteb model wrapper, checked to give token vectors with offsets."""
    from sentence_transformers import SentenceTransformer

    candidate = model if isinstance(model, SentenceTransformer) else getattr(model, "model", None)
    needs = "STSBContext scores spans from token vectors, so it needs a sentence-transformers model"
    if not isinstance(candidate, SentenceTransformer):
        raise TypeError(f"{needs}; got {type(model).__name__}.")
    first = candidate[0] if len(candidate) else None
    if getattr(getattr(first, "tokenizer", None), "is_fast", False):
        return candidate
    what = "it has no modules" if first is None else f"its first module is a {type(first).__name__}"
    raise TypeError(f"{needs} whose first module is a transformer with a fast tokenizer; {what}.")


def mteb_model(
    model: SentenceTransformer, name: str | None = None, revision: str | None = None
) -> Any:
    """``model`` wrapped for ``mteb.evaluate`` (mteb's ``SentenceTransformerEncoderWrapper``), its results filed under
    its Hub id (``slice-st/slice-minilm`` for the shipped model) or ``local/<folder>`` and the Hub revision or the
    weights' fingerprint; the meta carries the card's licence and base model (``adapted_from``) and the size."""
    from mteb import SentenceTransformerEncoderWrapper

    from slice_st.loading import model_fingerprint, model_identity

    wrapper = SentenceTransformerEncoderWrapper(model)
    identity, path = model_identity(model)
    card = model.model_card_data
    if name is None and path:  # mteb wants ORG/NAME
        name = f"local/{identity.replace('/', '-')}"
    elif name is None:
        name = identity if "/" in identity else f"slice-st/{identity}"
    if revision is None:
        revision = None if path else getattr(card, "base_model_revision", None)
        revision = revision or model_fingerprint(model)
    base = getattr(card, "base_model", None)
    update = {"name": name, "revision": revision}
    update["license"] = getattr(card, "license", None) or "not specified"
    update["adapted_from"] = base if base != identity else None
    update["n_parameters"] = sum(p.numel() for p in model.parameters())
    wrapper.mteb_model_meta = wrapper.mteb_model_meta.model_copy(update=update)
    return wrapper


def run_mteb(
    model_spec: str | None,
    tasks: list[str],
    *,
    stsb_context: str | None = None,
    output_folder: str | None = None,
    model_name: str | None = None,
    revision: str | None = None,
    batch_size: int = 32,
    device: str | None = None,
    overwrite_strategy: str = "only-missing",
    show_progress_bar: bool = True,
    **task_options: Any,
) -> Any:
    """``slice-st mteb run``: build the tasks (``STSBContext(stsb_context, **task_options)``: ``source``, ``limit``,
    spans; others by ``mteb.get_task``), load the model and call ``mteb.evaluate`` into ``ResultCache(output_folder)``;
    returns mteb's result."""
    import mteb

    from slice_st.loading import load_model

    if task_options.get("limit") is not None and any(task != "STSBContext" for task in tasks):
        raise SpanInputError("limit (--limit) applies to the STSBContext task only.")
    built = []
    for task in tasks:
        if task != "STSBContext":
            try:
                built.append(mteb.get_task(task))
            except KeyError:
                raise SpanInputError(f"unknown mteb task {task!r}.") from None
            continue
        path = stsb_context or os.environ.get(DATA_ENV)
        if not path:
            raise FileNotFoundError(
                f"STSBContext needs the STS-B-Context TSV: give --stsb-context (or {DATA_ENV})."
            )
        if "://" not in path and not os.path.exists(path):
            raise FileNotFoundError(f"--stsb-context: file not found: {path}")
        built.append(STSBContext(path, **task_options))
    if output_folder:  # said before the evaluation, not after it
        check_output(output_folder, "--output-folder")
    model = load_model(None if model_spec in (None, "default") else model_spec, device=device)
    cache = mteb.ResultCache(output_folder) if output_folder else None
    options = {"cache": cache, "overwrite_strategy": overwrite_strategy, "co2_tracker": False}
    options["show_progress_bar"] = show_progress_bar
    encode = {"batch_size": batch_size, "show_progress_bar": show_progress_bar}
    try:
        with _without_renamed_method_warnings():
            wrapped = mteb_model(model, model_name, revision)
            for task in built if cache is not None and overwrite_strategy != "always" else ():
                if isinstance(task, STSBContext):
                    _check_cached_revision(cache, task, wrapped.mteb_model_meta)
            return mteb.evaluate(wrapped, built, encode_kwargs=encode, **options)
    # a task whose data is on the Hub, offline (HF_HUB_OFFLINE=1) or without a network
    except ConnectionError as error:
        why = " ".join(str(error).split())[:200]
        raise FileNotFoundError(
            f"the data of mteb task(s) {', '.join(tasks)} is not available here ({why}): run once with network access "
            "(HF_HUB_OFFLINE unset) to cache it."
        ) from None


@contextlib.contextmanager
def _without_renamed_method_warnings():
    """Hide the FutureWarning sentence-transformers 6 gives each time mteb 2 calls a method under its old name
    (``get_sentence_embedding_dimension``): a note to mteb's authors, that users cannot act on; nothing else."""
    with warnings.catch_warnings():
        warnings.filterwarnings(
            "ignore", r"The `\w+` method has been renamed", FutureWarning, r"mteb\."
        )
        yield


def _check_cached_revision(cache, task: STSBContext, meta) -> None:
    """Refuse a cached result of another file or sample (mteb finds cached results by task name and model alone)."""
    cached = cache.load_task_result(task.metadata.name, meta)
    if cached is not None and cached.dataset_revision != task.metadata.revision:
        where = cache.get_task_result_path(
            task.metadata.name, meta.model_name_as_path(), meta.revision
        )
        raise FileAccessError(
            f"{where} holds STSBContext results of another file or sample (dataset revision "
            f"{cached.dataset_revision}; this one is {task.metadata.revision}): give another --output-folder, or "
            "--overwrite-strategy always to replace them."
        )
