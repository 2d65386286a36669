"""The SLICE model card: sentence-transformers' card data plus a SLICE section (``slice_st/model_card/template.md``),
given by :func:`slice_st.load_model`, the SLICE losses and ``slice-st train``; sentence-transformers renders it."""

from __future__ import annotations

import dataclasses
import hashlib
import os
import tempfile
from dataclasses import dataclass, field
from importlib.resources import files
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sentence_transformers.sentence_transformer.model_card import SentenceTransformerModelCardData

from slice_st.config import get_span_config
from slice_st.files import atomic_file
from slice_st.pretrained import (
    BASE_MODEL_NAMES,
    DEFAULT_MODEL_NAME,
    DEFAULT_SHIPPED_MODEL,
    default_model_path,
    shipped_model,
)

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

#: The paper's BibTeX, in mteb's normalised form (the STSBContext task cites it too).
SLICE_CITATION = r"""
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

SLICE_TAGS = ["slice-st", "slice", "span-embeddings", "phrase-mining"]
SLICE_EXPANSION = "Span-Aggregatable, Contextualized Word Embeddings"


@dataclass(frozen=True)
class DataSource:
    """A training data source as the card names it; ``terms``: ``"nc"``, ``"sa"``, ``"by"`` or ``"unknown"``."""

    name: str
    hub_id: str | None
    license: str
    terms: str


#: What slice-st's data options are made of (see shared/DATA.md).
DATA_SOURCES: dict[str, DataSource] = {
    "msmarco": DataSource(
        "MS MARCO training triples", "microsoft/ms_marco", "non-commercial research use", "nc"
    ),
    "snli": DataSource("SNLI", "stanfordnlp/snli", "CC BY-SA 4.0", "sa"),
    "sick": DataSource("SICK", "RobZamp/sick", "CC BY-NC-SA 3.0", "nc"),
    "stsb": DataSource(
        "STS-B (train split)", "sentence-transformers/stsb", "CC BY-SA 4.0 (scores)", "sa"
    ),
    "ppdb": DataSource("PPDB phrase pairs (PEARL's filtered set)", None, "CC BY 3.0", "by"),
    "parabank": DataSource("ParaBank documents (Nugget's set)", None, "not stated", "unknown"),
    "local": DataSource(
        "your own data (a local dataset or text files)", None, "not known to slice-st", "unknown"
    ),
}
DEFAULT_BASE_LICENSE = "apache-2.0"  # all-MiniLM-L6-v2's
#: The sources behind each kind of training data of the lab's data sets (research/train.py): ``offline`` holds only
#: data whose licence allows commercial use, ``paper`` the paper's full set (with non-commercial and unlicensed data).
OFFLINE_SOURCES = {
    "offline": {"slice": ["snli", "stsb"], "distill": ["stsb", "snli"]},
    "paper": {
        "slice": ["snli", "sick", "stsb", "ppdb"],
        "distill": ["stsb", "sick", "snli", "parabank"],
    },
}


def training_sources(
    train_data: list[str] | None, distill_data: list[str] | None
) -> tuple[list[str], list[str]]:
    """The :data:`DATA_SOURCES` keys behind ``--train-data`` and ``--distill-data`` (``offline[:DIR]``,
    ``paper[:DIR]``, ``msmarco:PATH`` or local paths): those of the SLICE triplets and of the distillation passages.

    >>> training_sources(["paper:/data", "msmarco:/x/triples.tsv"], ["offline", "notes.txt"])
    (['snli', 'sick', 'stsb', 'ppdb', 'msmarco'], ['stsb', 'snli', 'local'])
    """

    def keys(values, objective):
        found: list[str] = []
        for value in values or []:
            kind = value.split(":", 1)[0] if ":" in value and not os.path.exists(value) else value
            if kind in OFFLINE_SOURCES:
                found += OFFLINE_SOURCES[kind][objective]
            else:
                found += ["msmarco"] if kind == "msmarco" else ["local"]
        return list(dict.fromkeys(found))

    return keys(train_data, "slice"), keys(distill_data, "distill")


def card_license(sources: list[str], base_model: str | None) -> tuple[str | None, str]:
    """``(Hub licence id, note)`` for weights trained on ``sources`` from ``base_model``: the most restrictive terms
    win (unknown → ``other``, then non-commercial, share-alike, attribution); no data → the base model's licence.

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
    strictest = [("nc", "cc-by-nc-sa-4.0", "non-commercial"), ("sa", "cc-by-sa-4.0", "share-alike")]
    for kind, licence, words in strictest + [("by", "cc-by-4.0", "attribution")]:
        if kind in terms:
            return (
                licence,
                f"Trained on {words} data, so the weights are {licence}. Sources: {listed}.",
            )
    if base_model == DEFAULT_MODEL_NAME:
        return DEFAULT_BASE_LICENSE, "No SLICE training data; the licence is the base model's."
    return None, "No SLICE training data; see the base model's licence."


@dataclass
class SliceModelCardData(SentenceTransformerModelCardData):
    """sentence-transformers' model card data with a SLICE section (``slice_section``). ``shipped_name``: the shipped
    model's name (``slice-minilm``), which indexes record and ``load_model`` reopens (not a Hub id)."""

    slice_section: dict[str, Any] = field(default_factory=dict)
    shipped_name: str | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        # else sentence-transformers' own card until a SLICE loss trains the model
        if self.slice_section:
            self.template_path = slice_template_path()

    def set_losses(self, losses: list[Any]) -> None:
        """Called by sentence-transformers' model card callback when a trainer (``fit()`` too) is built: a SLICE loss
        among ``losses`` makes this a SLICE card, listed with its settings."""
        super().set_losses(losses)
        for loss in losses:
            if getattr(loss, "citation", None) == SLICE_CITATION:
                self.add_slice_loss(loss)

    # A SpanEncoder saves as a plain SentenceTransformer (same model_type): its card names that class, as it loads.
    def get_default_model_name(self) -> str:
        """The card's title, naming the class the saved model loads as (``SentenceTransformer``)."""
        name = "SentenceTransformer"
        return f"{name} based on {self.base_model}" if self.base_model else name

    def get_model_specific_metadata(self) -> dict[str, Any]:
        """sentence-transformers' metadata, the architecture under the class the saved model loads as."""
        metadata = super().get_model_specific_metadata()
        own = type(self.model).__name__
        model_string = str(metadata.get("model_string", ""))
        if own != "SentenceTransformer" and model_string.startswith(own + "("):
            metadata["model_string"] = "SentenceTransformer" + metadata["model_string"][len(own) :]
        return metadata

    def add_slice_loss(self, loss: Any = None) -> None:
        """Make this a SLICE card (its section, template and tags); list ``loss`` with its settings, once per class."""
        if not self.slice_section:
            note = "The licence is the base model's; slice-st does not know the training data's terms: check them."
            self.slice_section = _slice_section(self.model, license_note=note)
        self.template_path = slice_template_path()
        self.add_tags(SLICE_TAGS)
        name = type(loss).__name__
        if loss is not None and all(
            entry["name"].split(" ")[0] != name for entry in self.slice_section["losses"]
        ):
            settings = loss.get_config_dict() if hasattr(loss, "get_config_dict") else {}
            settings = {key: _public(value) for key, value in settings.items()}
            self.slice_section["losses"].append({"name": name, "settings": settings})

    def to_dict(self) -> dict[str, Any]:
        """sentence-transformers' card variables, the span settings read from the model at render time."""
        if self.model is not None and self.slice_section:
            self.slice_section["span"] = get_span_config(self.model).to_dict()
        return super().to_dict()

    @classmethod
    def from_card(cls, card: SentenceTransformerModelCardData) -> SliceModelCardData:
        """This class's card holding all ``card`` holds (base model, licence, id, datasets, logs, registered model)."""
        if isinstance(card, cls):
            return card
        new = cls()  # then every value as it is: nothing validated again (an id without an organisation is kept)
        new.__dict__.update(vars(card))
        return new


def slice_template_path() -> Path:
    """ST's card template with the SLICE section before "## Model Details", as a file (the Hub renders a path)."""
    # the template_path field's default
    base = Path(SentenceTransformerModelCardData.template_path).read_text(encoding="utf-8")
    section = files("slice_st.model_card").joinpath("template.md").read_text(encoding="utf-8")
    marker = "\n## Model Details"
    composed = base.replace(marker, "\n" + section.rstrip() + "\n" + marker, 1)
    digest = hashlib.sha1(composed.encode()).hexdigest()[:12]
    path = Path(tempfile.gettempdir()) / f"slice-st-model-card-{digest}.md"
    if not path.exists():
        # a shared temp folder: never via a link
        with atomic_file(path, "w", encoding="utf-8", sync=False) as handle:
            handle.write(composed)
    return path


def hub_model_name(name: str | None) -> str | None:
    """A base model name fit to publish (a card, an adapter's config): a Hub id, never a local path (``None``)."""
    if name is None or name in BASE_MODEL_NAMES or name == DEFAULT_SHIPPED_MODEL:
        return DEFAULT_MODEL_NAME
    path = os.path.expanduser(name)
    if os.path.exists(path) and os.path.samefile(path, default_model_path()):
        return DEFAULT_MODEL_NAME
    # a local path: its name says nothing to a reader
    local = os.path.isabs(path) or os.path.exists(path)
    return name if not local and name.count("/") == 1 else None


def apply_model_card(
    model: SentenceTransformer,
    config: Any = None,
    *,
    repo_id: str | None = None,
    trainer_datasets: list[str] | None = None,
) -> SliceModelCardData:
    """Give ``model`` SLICE card data for a ``slice-st train`` run (kept by every later save and push); returns it.

    ``config``: the run's settings (a dict or :class:`~slice_st.training.SliceArguments`); ``repo_id``: the Hub
    repository; ``trainer_datasets``: the objectives of the trainer's datasets, in its order (it adds statistics).
    """
    training = (
        dataclasses.asdict(config) if dataclasses.is_dataclass(config) else dict(config or {})
    )
    old = model.model_card_data
    base_model = (
        hub_model_name(training.get("model"))
        if training
        else (old.base_model or hub_model_name(None))
    )
    parts = training_sources(training.get("train_data"), training.get("distill_data"))
    keys = dict(zip(("slice", "distill"), parts))
    sources = list(dict.fromkeys(keys["slice"] + keys["distill"]))
    license_id, license_note = card_license(sources, base_model)
    if training.get("license"):
        license_id, license_note = training["license"], f"Licence set for this run. {license_note}"
    names = {
        part: ", ".join(DATA_SOURCES[key].name for key in found)
        for part, found in keys.items()
        if found
    }
    titles = {"slice": "SLICE triplets from ", "distill": "Distillation passages from "}
    datasets = [
        {"name": titles[part] + names[part]} for part in trainer_datasets or [] if part in names
    ]
    card = SliceModelCardData(
        language="en",
        license=license_id,
        model_name=f"SLICE span embeddings ({(base_model or 'a local base model').split('/')[-1]})",
        train_datasets=datasets
        if trainer_datasets and len(datasets) == len(trainer_datasets)
        else [],
        tags=list(dict.fromkeys(list(old.tags) + SLICE_TAGS)),
        local_files_only=True,  # no Hub look-ups while rendering; metadata below is set directly
    )
    # after construction: the shipped name has no organisation
    card.model_id = repo_id or old.model_id
    card.base_model = base_model
    card.datasets = list(
        dict.fromkeys(DATA_SOURCES[key].hub_id for key in sources if DATA_SOURCES[key].hub_id)
    )
    lora_r = training.get("lora_r")
    card.slice_section = _slice_section(
        model,
        sources=[dataclasses.asdict(DATA_SOURCES[key]) for key in sources],
        license_note=license_note,
        losses=_run_losses(training, get_span_config(model)),
        steps=training.get("max_steps"),
        lora={"r": lora_r, "alpha": training.get("lora_alpha") or 2 * lora_r} if lora_r else None,
    )
    card.template_path = slice_template_path()
    model.model_card_data = card
    card.register_model(model)
    return card


def _run_losses(training: dict[str, Any], span: Any) -> list[dict[str, Any]]:
    """The losses of a ``slice-st train`` run and their settings, as the card lists them."""
    losses = []
    if training.get("train_data") or not training.get("distill_data"):
        settings = {"scale": 30.0, **span.to_dict()}
        settings.update({key: training[key] for key in settings if key in training})
        losses.append({"name": "SpanMaxCrossEntropyLoss", "settings": settings})
    if training.get("distill_data"):
        teacher = training.get("teacher")
        if teacher:
            teacher = hub_model_name(teacher) or "a local model"
        names = "distill_spans distill_max_span distill_metric distill_text_weight distill_weight"
        settings = {key: training[key] for key in names.split() if key in training}
        settings = {"teacher": teacher or "a frozen copy of the base model", **settings}
        losses.append({"name": "SpanDistillationLoss", "settings": settings})
    return losses


def _public(value: Any) -> Any:
    """A loss setting fit for a public card: a local path (a teacher folder, say) is not named."""
    if isinstance(value, str) and (
        os.path.isabs(value) or os.path.exists(os.path.expanduser(value))
    ):
        return hub_model_name(value) or "a local model"
    return value


def _slice_section(model: SentenceTransformer, **values: Any) -> dict[str, Any]:
    """The SLICE section's variables (``slice_st/model_card/template.md``): defaults, then ``values``."""
    span = get_span_config(model).to_dict()
    section = dict(expansion=SLICE_EXPANSION, span=span, license_note="", losses=[], sources=[])
    return section | dict(steps=None, lora=None, citation=SLICE_CITATION.strip()) | values


def slice_card_data(model: SentenceTransformer, loss: Any = None) -> SliceModelCardData:
    """``model``'s card as a :class:`SliceModelCardData`, keeping all it says; with ``loss``, a SLICE card listing it.

    :func:`slice_st.load_model` gives every model it loads such a card, which renders as sentence-transformers' own
    until a trainer with a SLICE loss (``fit()``, a ``SentenceTransformerTrainer``) hands it its losses.
    """
    old = model.model_card_data
    card = SliceModelCardData.from_card(old)
    if card is not old:
        model.model_card_data = card
        card.register_model(model)
    if loss is not None:
        card.add_slice_loss(loss)
    return card


def describe_embedded_base(model: SentenceTransformer) -> None:
    """Name the embedded base model's Hub id and licence on ``model``'s card."""
    card = model.model_card_data
    card.base_model = card.base_model or DEFAULT_MODEL_NAME
    card.license = card.license or DEFAULT_BASE_LICENSE
    card.local_files_only = True


def describe_shipped_model(
    model: SentenceTransformer, name: str = DEFAULT_SHIPPED_MODEL
) -> SliceModelCardData:
    """Give the shipped model ``name`` its SLICE card from ``provenance.json``; returns it."""
    shipped = shipped_model(name)
    provenance = shipped.provenance
    card = apply_model_card(model, provenance.get("recipe") or {})
    card.model_id = None  # a saved or pushed copy is loaded by the id it is saved or pushed as, never by this name
    card.shipped_name = shipped.name
    card.model_name = f"{shipped.name}: {shipped.description}"
    licence, _, note = str(provenance["licence"]).partition(":")  # "id: why"
    card.license, note = licence.strip(), note.strip()
    stop = "." if note and note[-1] != "." else ""
    card.slice_section["license_note"] = note[:1].upper() + note[1:] + stop
    return card
