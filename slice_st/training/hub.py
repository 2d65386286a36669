"""Model cards and the Hugging Face Hub for SLICE models: one card, local and on the Hub.

The card is sentence-transformers' own (``model.model_card_data``, rendered by ``model.save`` into
``README.md`` of every checkpoint, of ``OUTPUT/final`` and of every Hub push), filled in for a SLICE
model — base model, name, language, the training data (by name, never a local path), a licence chosen
with that data in mind, tags — plus a SLICE section (``model_card/template.md``) inserted before
sentence-transformers' "Model Details".

Pushes are the trainer's own (``TrainingArguments(push_to_hub=True, hub_model_id=…, hub_strategy=…,
hub_private_repo=…)`` and ``trainer.push_to_hub()``); :func:`check_hub_access` checks, **before**
anything is trained, that a push can succeed: the Hub is not switched off, a token is there, and it may
write to the repository (``huggingface_hub``'s public ``whoami`` / ``repo_info``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import tempfile
from dataclasses import dataclass, field
from importlib.resources import files
from pathlib import Path
from typing import Any

from sentence_transformers.sentence_transformer.model_card import SentenceTransformerModelCardData

from slice_st.config import get_span_config
from slice_st.errors import HubAccessError
from slice_st.loading import DEFAULT_MODEL_NAME, hub_offline
from slice_st.losses.span_max_cross_entropy import SLICE_CITATION
from slice_st.text import atomic_file, require

__all__ = [
    "SliceModelCardData",
    "DataSource",
    "DATA_SOURCES",
    "training_sources",
    "card_license",
    "apply_model_card",
    "render_model_card",
    "HubAccessError",
    "check_hub_access",
]

#: Tags every SLICE card carries (sentence-transformers adds its own).
SLICE_TAGS = ["slice-st", "slice", "span-embeddings", "phrase-mining"]
SLICE_EXPANSION = "Span-Aggregatable, Contextualized Word Embeddings"


@dataclass(frozen=True)
class DataSource:
    """A training data source as the card names it: display name, Hub dataset id (if it has a public one), licence."""

    name: str
    hub_id: str | None
    license: str
    #: ``"nc"`` (non-commercial), ``"sa"`` (share-alike), ``"by"`` (attribution) or ``"unknown"``.
    terms: str


#: What slice-st's data options are made of (see shared/DATA.md).
DATA_SOURCES: dict[str, DataSource] = {
    "msmarco": DataSource(
        "MS MARCO training triples", "microsoft/ms_marco", "non-commercial research use (MS MARCO terms)", "nc"
    ),
    "snli": DataSource("SNLI", "stanfordnlp/snli", "CC BY-SA 4.0", "sa"),
    "sick": DataSource("SICK", "RobZamp/sick", "CC BY-NC-SA 3.0", "nc"),
    "stsb": DataSource(
        "STS benchmark (train split)",
        "sentence-transformers/stsb",
        "CC BY-SA 4.0 (scores; sentences under their sources' terms)",
        "sa",
    ),
    "ppdb": DataSource("PPDB phrase pairs (PEARL's filtered set)", None, "CC BY 3.0", "by"),
    "parabank": DataSource("ParaBank documents (Nugget's set)", None, "not stated", "unknown"),
    "local": DataSource("your own data (a local dataset or text files)", None, "not known to slice-st", "unknown"),
}
#: The licence of the embedded default base model (all-MiniLM-L6-v2).
DEFAULT_BASE_LICENSE = "apache-2.0"


#: What ``offline`` means for each kind of training data (see slice_st.training.trainer).
OFFLINE_SOURCES = {
    "slice": ["snli", "sick", "stsb", "ppdb"],
    "distill": ["stsb", "sick", "snli", "parabank"],
}


def training_sources(train_data: list[str] | None, distill_data: list[str] | None) -> tuple[list[str], list[str]]:
    """The :data:`DATA_SOURCES` keys behind ``--train-data`` and ``--distill-data`` (no paths).

    Args:
        train_data: ``TrainConfig.train_data`` (``offline[:DIR]``, ``msmarco:PATH`` or local folders).
        distill_data: ``TrainConfig.distill_data`` (``offline[:DIR]`` or local files and folders).

    Returns:
        The source keys of the SLICE triplets and of the distillation passages, each without duplicates.

    Example:
        >>> training_sources(["offline:/data", "msmarco:/x/triples.tsv"], ["offline", "notes.txt"])
        (['snli', 'sick', 'stsb', 'ppdb', 'msmarco'], ['stsb', 'sick', 'snli', 'parabank', 'local'])
    """

    def keys(values, offline):
        found: list[str] = []
        for value in values or []:
            kind = value.split(":", 1)[0] if ":" in value and not os.path.exists(value) else value
            found += offline if kind == "offline" else ["msmarco"] if kind == "msmarco" else ["local"]
        return list(dict.fromkeys(found))

    return keys(train_data, OFFLINE_SOURCES["slice"]), keys(distill_data, OFFLINE_SOURCES["distill"])


def card_license(sources: list[str], base_model: str | None) -> tuple[str | None, str]:
    """``(Hub licence id, note)`` for weights trained on ``sources`` from ``base_model``.

    Data without a stated licence → ``other`` (check before use); else non-commercial data →
    ``cc-by-nc-sa-4.0``; else share-alike data → ``cc-by-sa-4.0``; else attribution → ``cc-by-4.0``;
    no training data → the base model's licence (all-MiniLM-L6-v2: Apache-2.0).

    >>> card_license(["snli", "sick", "stsb", "ppdb"], "sentence-transformers/all-MiniLM-L6-v2")[0]
    'cc-by-nc-sa-4.0'
    >>> card_license(["stsb", "parabank"], None)[0], card_license([], DEFAULT_MODEL_NAME)[0]
    ('other', 'apache-2.0')
    """
    known = [DATA_SOURCES[key] for key in sources]
    listed = "; ".join(f"{source.name}: {source.license}" for source in known)
    terms = {source.terms for source in known}
    if "unknown" in terms:
        unknown = ", ".join(source.name for source in known if source.terms == "unknown")
        return "other", (
            f"Trained on data whose licence is not stated or not known here ({unknown}); check the terms of every "
            f"source before using these weights. Sources: {listed}."
        )
    if "nc" in terms:
        return "cc-by-nc-sa-4.0", (
            f"Trained on non-commercial data, so the weights are for non-commercial use (CC BY-NC-SA 4.0). "
            f"Sources: {listed}."
        )
    if "sa" in terms:
        return "cc-by-sa-4.0", f"Trained on share-alike data (CC BY-SA 4.0). Sources: {listed}."
    if "by" in terms:
        return "cc-by-4.0", f"Sources: {listed}."
    if base_model == DEFAULT_MODEL_NAME:
        return DEFAULT_BASE_LICENSE, "No SLICE training data; the licence is the base model's."
    return None, "No SLICE training data; see the base model's licence."


@dataclass
class SliceModelCardData(SentenceTransformerModelCardData):
    """sentence-transformers' model card data, with a SLICE section (``slice_section``, rendered by
    ``model_card/template.md`` inside sentence-transformers' template)."""

    slice_section: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        super().__post_init__()
        self.template_path = slice_template_path()


def slice_template_path() -> Path:
    """sentence-transformers' card template with the SLICE section inserted before "## Model Details"
    (written once per template version to a cache file, since huggingface_hub renders from a path)."""
    base_path = next(
        f.default for f in dataclasses.fields(SentenceTransformerModelCardData) if f.name == "template_path"
    )
    base = Path(base_path).read_text(encoding="utf-8")
    section = files("slice_st.model_card").joinpath("template.md").read_text(encoding="utf-8")
    marker = "\n## Model Details"
    composed = (
        base.replace(marker, "\n" + section.rstrip() + "\n" + marker, 1)
        if marker in base
        else base.rstrip() + "\n\n" + section
    )
    digest = hashlib.sha1(composed.encode()).hexdigest()[:12]
    path = Path(tempfile.gettempdir()) / f"slice-st-model-card-{digest}.md"
    if not path.exists():
        with atomic_file(
            path, "w", encoding="utf-8", sync=False
        ) as handle:  # shared temp folder: never through a planted link
            handle.write(composed)
    return path


def _hub_base_model(name: str | None) -> str | None:
    """A base model name fit for a public card: a Hub id, never a local path (the embedded base and the
    shipped ``slice-minilm``, itself all-MiniLM-L6-v2 with an adapter merged, are all-MiniLM-L6-v2)."""
    from slice_st.loading import BASE_MODEL_NAMES, DEFAULT_SHIPPED_MODEL, default_model_path

    if name is None or name in BASE_MODEL_NAMES or name == DEFAULT_SHIPPED_MODEL:
        return DEFAULT_MODEL_NAME
    path = os.path.expanduser(name)
    if os.path.exists(path):
        try:
            if os.path.samefile(path, default_model_path()):
                return DEFAULT_MODEL_NAME
        except OSError:
            pass
        return None  # a local folder: its name says nothing to a reader of the card
    return name if name.count("/") == 1 else None


def apply_model_card(
    model, config: Any = None, *, repo_id: str | None = None, trainer_datasets: list[str] | None = None
) -> SliceModelCardData:
    """Give ``model`` SLICE card data (kept by every later ``model.save`` and trainer push); returns it.

    ``config`` is the run's :class:`~slice_st.training.TrainConfig` (or a dict of it): base model,
    training data (by name: ``offline`` → SNLI, SICK, STS-B train, PPDB; ``msmarco:…`` → MS MARCO;
    anything else → "your own data"), losses and span settings. ``repo_id`` is the Hub repository.
    ``trainer_datasets``: the objectives (``slice``/``distill``) of the trainer's datasets, in the
    trainer's order, for a card built before a ``SentenceTransformerTrainer`` (one named entry per dataset;
    the trainer fills in their statistics).
    """
    training = dataclasses.asdict(config) if dataclasses.is_dataclass(config) else dict(config or {})
    old = model.model_card_data
    base_model = _hub_base_model(training.get("model")) if training else (old.base_model or _hub_base_model(None))
    train_keys, distill_keys = training_sources(training.get("train_data"), training.get("distill_data"))
    sources = list(dict.fromkeys(train_keys + distill_keys))
    license_id, license_note = card_license(sources, base_model)
    if training.get("license"):
        license_id, license_note = (
            training["license"],
            f"Licence set for this run ({training['license']}). " + license_note,
        )
    span = get_span_config(model)
    losses = []
    if training.get("train_data") or not training.get("distill_data"):
        losses.append(
            {
                "name": "SpanMaxCrossEntropyLoss",
                "settings": {
                    "scale": training.get("scale", 30.0),
                    "min_span": training.get("min_span", span.min_span),
                    "max_span": training.get("max_span", span.max_span),
                    "unit": training.get("unit", span.unit),
                },
            }
        )
    if training.get("distill_data"):
        score = training.get("distill_loss") == "score"
        name = "SpanScoreDistillationLoss (experimental)" if score else "SpanDistillationLoss"
        losses.append(
            {
                "name": name,
                "settings": {
                    "teacher": "a frozen copy of the base model"
                    if not training.get("teacher")
                    else (_hub_base_model(training["teacher"]) or "a local model"),
                    **{
                        key: training[key]
                        for key in (
                            "distill_spans",
                            "distill_max_span",
                            "distill_metric",
                            "distill_text_weight",
                            "distill_weight",
                        )
                        if key in training
                    },
                },
            }
        )
    datasets_by_objective = {"slice": train_keys, "distill": distill_keys}
    titles = {"slice": "SLICE triplets from ", "distill": "Distillation passages from "}
    train_datasets = [
        {"name": titles[name] + ", ".join(DATA_SOURCES[key].name for key in datasets_by_objective[name])}
        for name in trainer_datasets or []
        if datasets_by_objective.get(name)
    ]
    card = SliceModelCardData(
        language="en",
        license=license_id,
        model_name=f"SLICE span embeddings ({(base_model or 'a local base model').split('/')[-1]})",
        model_id=repo_id or old.model_id,
        train_datasets=train_datasets if trainer_datasets and len(train_datasets) == len(trainer_datasets) else [],
        tags=list(dict.fromkeys(list(old.tags) + SLICE_TAGS)),
        local_files_only=True,  # no Hub look-ups while rendering; metadata below is set directly
    )
    card.base_model = base_model
    card.datasets = list(dict.fromkeys(DATA_SOURCES[key].hub_id for key in sources if DATA_SOURCES[key].hub_id))
    card.slice_section = {
        "expansion": SLICE_EXPANSION,
        "span": span.to_dict(),
        "losses": losses,
        "sources": [dataclasses.asdict(DATA_SOURCES[key]) for key in sources],
        "license_note": license_note,
        "model_id": repo_id or old.model_id,
        "steps": training.get("max_steps") if training else None,
        "lora": {"r": training["lora_r"], "alpha": training.get("lora_alpha") or 2 * training["lora_r"]}
        if training.get("lora_r")
        else None,
        "citation": SLICE_CITATION.strip(),
    }
    model.model_card_data = card
    card.register_model(model)
    return card


def render_model_card(model, config: Any = None, *, repo_id: str | None = None) -> str:
    """The card ``model.save`` would write (SLICE card data applied first if the model has none)."""
    from sentence_transformers.base.model_card import generate_model_card

    if not isinstance(model.model_card_data, SliceModelCardData) or config is not None or repo_id is not None:
        apply_model_card(model, config, repo_id=repo_id)
    return generate_model_card(model)


# ------------------------------------------------------------------------------------------- Hub
def check_hub_access(repo_id: str, *, private: bool | None = None, api=None) -> dict[str, Any]:
    """Check that ``repo_id`` can be pushed to, before any training: raise :class:`HubAccessError` saying why not.

    The Hub must not be switched off (``HF_HUB_OFFLINE``), a token must be set (``hf auth login`` or
    ``HF_TOKEN``) and valid, with write access, and the repository must be the user's or one of their
    organisations' (it is created if missing). ``api`` defaults to ``huggingface_hub.HfApi()``.
    Returns ``whoami``'s answer.
    """
    if not isinstance(repo_id, str) or repo_id.count("/") != 1 or not all(repo_id.split("/")):
        raise HubAccessError(f"--push-to-hub needs a repository id ORG/NAME, got {repo_id!r}.")
    if hub_offline():
        raise HubAccessError(
            f"cannot push to {repo_id}: the Hub is switched off (HF_HUB_OFFLINE=1); unset it, or train without "
            f"--push-to-hub."
        )
    huggingface_hub = require("huggingface_hub", "train", "pushing to the Hub")
    from huggingface_hub.errors import HfHubHTTPError, RepositoryNotFoundError

    api = api if api is not None else huggingface_hub.HfApi()
    if not huggingface_hub.get_token():
        raise HubAccessError(f"cannot push to {repo_id}: no Hugging Face token; run `hf auth login` or set HF_TOKEN.")
    try:
        me = api.whoami()
    except HfHubHTTPError as error:
        raise HubAccessError(
            f"cannot push to {repo_id}: the Hub refused the token ({' '.join(str(error).split())[:160]})."
        ) from None
    except (OSError, ConnectionError) as error:
        raise HubAccessError(
            f"cannot push to {repo_id}: the Hub cannot be reached ({' '.join(str(error).split())[:160]})."
        ) from None
    role = ((me.get("auth") or {}).get("accessToken") or {}).get("role")
    if role == "read":
        raise HubAccessError(f"cannot push to {repo_id}: the token is read-only; create one with write access.")
    namespace = repo_id.split("/")[0]
    mine = {me.get("name")} | {org.get("name") for org in me.get("orgs") or []}
    if namespace not in mine:
        raise HubAccessError(
            f"cannot push to {repo_id}: the token's user {me.get('name')!r} is not {namespace!r} nor one of its "
            f"organisations."
        )
    try:
        api.repo_info(repo_id, repo_type="model")
    except RepositoryNotFoundError:
        pass  # created by the trainer (private: hub_private_repo)
    except HfHubHTTPError as error:
        raise HubAccessError(f"cannot push to {repo_id}: {' '.join(str(error).split())[:160]}.") from None
    return me
