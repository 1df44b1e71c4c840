"""Synthetic multi-party person data, record corruption, external datasets and linkage quality metrics."""

from party.synthetic.corrupt import OPERATORS, CorruptionError, Corruptor
from party.synthetic.external import DatasetError, ExternalDataset, load, load_folder
from party.synthetic.generator import (
    COLUMNS,
    GenerationError,
    SyntheticDataset,
    SyntheticTable,
    generate,
    party_csv_name,
    write_dataset,
)
from party.synthetic.metrics import (
    LinkageQuality,
    MatchEntry,
    MetricsError,
    evaluate,
    evaluate_files,
    evaluate_index_sets,
    evaluate_sets,
    read_matches_csv,
    sets_from_matches,
)
from party.synthetic.truth import GroundTruth, TruthError, truth_from_labels

__all__ = [
    "COLUMNS",
    "OPERATORS",
    "CorruptionError",
    "Corruptor",
    "DatasetError",
    "ExternalDataset",
    "GenerationError",
    "GroundTruth",
    "LinkageQuality",
    "MatchEntry",
    "MetricsError",
    "SyntheticDataset",
    "SyntheticTable",
    "TruthError",
    "evaluate",
    "evaluate_files",
    "evaluate_index_sets",
    "evaluate_sets",
    "generate",
    "load",
    "load_folder",
    "party_csv_name",
    "read_matches_csv",
    "sets_from_matches",
    "truth_from_labels",
    "write_dataset",
]
