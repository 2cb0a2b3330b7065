"""Datasets: the KBGym generator, the official PhantomWiki arm, the Memory-Gym synthesizer and
loaders for six public benchmarks, all as `Bundle`s of corpus documents and questions.

Import as `librarian.datasets` (never a top-level `datasets`, which is HuggingFace's).
"""

from librarian.datasets.records import (
    CORPUS_SCHEMA,
    QUESTION_SCHEMA,
    SCHEMA_VERSION,
    Bundle,
    CorpusDoc,
    DatasetError,
    Question,
    flat_documents,
    read_parquet,
    to_documents,
    write_parquet,
)

__all__ = [
    "CORPUS_SCHEMA",
    "QUESTION_SCHEMA",
    "SCHEMA_VERSION",
    "Bundle",
    "CorpusDoc",
    "DatasetError",
    "Question",
    "flat_documents",
    "read_parquet",
    "to_documents",
    "write_parquet",
]
