"""The SLICE model card: sentence-transformers' own card data, filled in for a SLICE model, from one path.

Every card slice-st gives a model comes from here and is rendered by sentence-transformers (``model.save``,
the trainer's checkpoints and Hub pushes): :class:`SliceModelCardData` is ``SentenceTransformerModelCardData``
plus a SLICE section (``model_card/template.md``, inserted before sentence-transformers' "Model Details": span
settings, losses, training data and their licences, the citation).

* :func:`slice_st.load_model` gives the shipped ``slice-minilm`` its card at load (base model, licence, recipe:
  :func:`describe_shipped_model`) and names the embedded base model's Hub id and licence
  (:func:`describe_embedded_base`);
* a SLICE loss (``SpanMaxCrossEntropyLoss``, ``SpanDistillationLoss``) turns its model's card into a SLICE card
  when it is built (:func:`slice_card_data`), so ``model.fit()`` and the ``SentenceTransformerTrainer`` write one,
  keeping the base model and licence the card already had;
* ``slice-st train`` describes the whole run: data by name, the licence chosen with that data in mind
  (:func:`apply_model_card`);
* :func:`slice_st.save_slice_model` writes the model's own card, never the base model's README.
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
from slice_st.pretrained import (
    BASE_MODEL_NAMES,
    DEFAULT_MODEL_NAME,
    DEFAULT_SHIPPED_MODEL,
    default_model_path,
    shipped_model,
)
from slice_st.text import atomic_file

__all__ = [
    "SliceModelCardData",
    "DataSource",
    "DATA_SOURCES",
    "DEFAULT_BASE_LICENSE",
    "OFFLINE_SOURCES",
    "SLICE_TAGS",
    "SLICE_EXPANSION",
    "slice_template_path",
    "SLICE_CITATION",
    "training_sources",
    "card_license",
    "apply_model_card",
    "slice_card_data",
    "describe_shipped_model",
    "describe_embedded_base",
    "render_model_card",
]

SLICE_CITATION = """
@misc{orbach2024slice,
    title={Span-Aggregatable, Contextualized Word Embeddings for Effective Phrase Mining},
    author={Eyal Orbach and Lev Haikin and Nelly David and Avi Faizakof},
    year={2024},
    eprint={2405.07263},
    archivePrefix={arXiv},
    primaryClass={cs.CL},
    url={https://arxiv.org/abs/2405.07263},
}
"""

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
        train_data: ``SliceArguments.train_data`` (``offline[:DIR]``, ``msmarco:PATH`` or local folders).
        distill_data: ``SliceArguments.distill_data`` (``offline[:DIR]`` or local files and folders).

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
    #: The shipped model's name (``slice-minilm``) for the model that is it: what indexes record and
    #: ``slice_st.load_model`` reopens. Not a Hub id: the card's usage lines name ``model_id`` (set by ``push_to_hub``
    #: and ``save(path, model_name=…)``), else sentence-transformers' placeholder.
    shipped_name: str | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        self.template_path = slice_template_path()

    def to_dict(self) -> dict[str, Any]:
        """sentence-transformers' card variables; the SLICE section's span settings are read from the model
        at render time (they may have changed since the card was made)."""
        if self.model is not None and self.slice_section:
            self.slice_section["span"] = get_span_config(self.model).to_dict()
        return super().to_dict()

    @classmethod
    def from_card(cls, card: SentenceTransformerModelCardData) -> SliceModelCardData:
        """A SLICE card holding everything ``card`` holds (base model, licence, model id, datasets, training
        logs, registered model): every dataclass field is carried over, the template is the SLICE one."""
        if isinstance(card, cls):
            return card
        # model_id is set after construction: sentence-transformers warns about (and drops) an id without an
        # organisation, such as the shipped model's name.
        new = cls(
            **{
                item.name: getattr(card, item.name)
                for item in dataclasses.fields(card)
                if item.init and item.name != "model_id"
            }
        )
        for item in dataclasses.fields(card):
            if (not item.init or item.name == "model_id") and item.name != "template_path":
                setattr(new, item.name, getattr(card, item.name))
        return new


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

    ``config`` is the run's settings (a dict, or a :class:`~slice_st.training.SliceArguments`): base model,
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
        train_datasets=train_datasets if trainer_datasets and len(train_datasets) == len(trainer_datasets) else [],
        tags=list(dict.fromkeys(list(old.tags) + SLICE_TAGS)),
        local_files_only=True,  # no Hub look-ups while rendering; metadata below is set directly
    )
    card.model_id = repo_id or old.model_id  # after construction: the shipped name has no organisation
    card.base_model = base_model
    card.datasets = list(dict.fromkeys(DATA_SOURCES[key].hub_id for key in sources if DATA_SOURCES[key].hub_id))
    card.slice_section = _slice_section(
        model,
        losses=losses,
        sources=[dataclasses.asdict(DATA_SOURCES[key]) for key in sources],
        license_note=license_note,
        steps=training.get("max_steps") if training else None,
        lora={"r": training["lora_r"], "alpha": training.get("lora_alpha") or 2 * training["lora_r"]}
        if training.get("lora_r")
        else None,
    )
    model.model_card_data = card
    card.register_model(model)
    return card


def _public(value: Any) -> Any:
    """A loss setting fit for a public card: a local path (a teacher folder, say) is not named."""
    if isinstance(value, str) and (os.path.isabs(value) or os.path.exists(os.path.expanduser(value))):
        return _hub_base_model(value) or "a local model"
    return value


def _slice_section(model, **values: Any) -> dict[str, Any]:
    """The SLICE section's variables (``model_card/template.md``): defaults, then ``values``."""
    return {
        "expansion": SLICE_EXPANSION,
        "span": get_span_config(model).to_dict(),
        "losses": [],
        "sources": [],
        "license_note": "",
        "steps": None,
        "lora": None,
        "citation": SLICE_CITATION.strip(),
        **values,
    }


def slice_card_data(model, loss: Any = None) -> SliceModelCardData:
    """Make ``model``'s card a SLICE card (if it is not one yet), keeping all it says; returns it.

    The SLICE losses call this when they are built, so ``model.fit()`` and a ``SentenceTransformerTrainer``
    write a card with the SLICE section, the base model and licence the card already had (the shipped model's,
    or the embedded base's, see :func:`slice_st.load_model`). ``loss``, if given, is listed under "SLICE
    training" with its settings (``get_config_dict()``), once per loss class.

    Args:
        model: A ``SentenceTransformer``.
        loss: The SLICE loss being built on ``model``, or ``None``.

    Returns:
        The model's (new) ``model_card_data``.

    Example:
        >>> from slice_st import load_model
        >>> from slice_st.losses import SpanMaxCrossEntropyLoss
        >>> model = load_model("base")
        >>> card = SpanMaxCrossEntropyLoss(model).model.model_card_data
        >>> type(card).__name__, card.base_model, card.license, card.slice_section["losses"][0]["name"]
        ('SliceModelCardData', 'sentence-transformers/all-MiniLM-L6-v2', 'apache-2.0', 'SpanMaxCrossEntropyLoss')
    """
    old = model.model_card_data
    card = SliceModelCardData.from_card(old)
    if not card.slice_section:
        card.slice_section = _slice_section(
            model,
            license_note=(
                "The licence is the one of the model training started from; slice-st does not know the terms of "
                "the data it was trained on here: check them before sharing these weights."
            ),
        )
    card.add_tags(SLICE_TAGS)
    if loss is not None:
        name = type(loss).__name__
        if all(entry["name"].split(" ")[0] != name for entry in card.slice_section["losses"]):
            settings = loss.get_config_dict() if hasattr(loss, "get_config_dict") else {}
            settings = {key: _public(value) for key, value in settings.items()}
            card.slice_section["losses"].append({"name": name, "settings": settings})
    if card is not old:
        model.model_card_data = card
        card.register_model(model)
    return card


def describe_embedded_base(model) -> None:
    """Name the embedded base model on ``model``'s card: its Hub id and licence (offline, a local folder would
    otherwise leave both unknown, and a card of a model trained from it would say "Base model: Unknown")."""
    card = model.model_card_data
    card.base_model = card.base_model or DEFAULT_MODEL_NAME
    card.license = card.license or DEFAULT_BASE_LICENSE
    card.local_files_only = True


def describe_shipped_model(model, name: str = DEFAULT_SHIPPED_MODEL) -> SliceModelCardData:
    """Give the shipped model ``name`` (loaded by :func:`slice_st.pretrained.load_shipped_model`) its SLICE card:
    the base model, the licence of ``provenance.json``, the recipe (losses, steps, LoRA rank, data by name); returns
    it. The card keeps ``name`` as its ``shipped_name`` (indexes record it)."""
    shipped = shipped_model(name)
    provenance = shipped.provenance
    card = apply_model_card(model, provenance.get("recipe") or {})
    card.model_id = None  # a saved or pushed copy is loaded by the id it is saved or pushed as, never by this name
    card.shipped_name = shipped.name
    card.model_name = f"{shipped.name}: {shipped.description}"
    card.base_model = shipped.base_model
    card.license = shipped.licence
    note = str(provenance.get("licence", "")).split(":", 1)[-1].strip()
    card.slice_section["license_note"] = note[:1].upper() + note[1:] + ("." if note and note[-1] != "." else "")
    return card


def render_model_card(model, config: Any = None, *, repo_id: str | None = None) -> str:
    """The card ``model.save`` would write (SLICE card data applied first if the model has none)."""
    from sentence_transformers.base.model_card import generate_model_card

    if not isinstance(model.model_card_data, SliceModelCardData) or config is not None or repo_id is not None:
        apply_model_card(model, config, repo_id=repo_id)
    return generate_model_card(model)
