from mteb.abstasks.sts import AbsTaskSTS
from mteb.abstasks.task_metadata import TaskMetadata


class STSBContextSTS(AbsTaskSTS):
    min_score = 0
    max_score = 5

    metadata = TaskMetadata(
        name="STSBContext",
        dataset={
            "path": "mteb/stsb-context",
            "revision": "set-on-upload",
        },
        description=(
            "STS-B-Context: pairs of the STS benchmark's test split whose second sentence sits verbatim inside a "
            "passage a language model (GPT-3.5) wrote around it. The first sentence is compared with the whole "
            "passage, so a model is scored on how well a passage's embedding keeps the meaning of one phrase in it "
            "(phrase mining in context); the gold scores are STS-B's."
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
        license="not specified",
        annotations_creators="human-annotated",
        dialect=[],
        sample_creation="LM-generated and verified",
        bibtex_citation=r"""
@misc{orbach2024slice,
  archiveprefix = {arXiv},
  author = {Orbach, Eyal and Haikin, Lev and David, Nelly and Faizakof, Avi},
  eprint = {2405.07263},
  primaryclass = {cs.CL},
  title = {Span-Aggregatable, Contextualized Word Embeddings for Effective Phrase Mining},
  url = {https://arxiv.org/abs/2405.07263},
  year = {2024},
}
""",
        adapted_from=["STSBenchmark"],
    )
