"""CVPL (Khvatov & Neyman, arXiv 2602.11015): geometric linkage-risk assessment of a release."""

from party.audit.cvpl.assess import CvplConfig, CvplResult, assess_tables
from party.audit.cvpl.bitrisk import BitRiskResult, assess_bits
from party.audit.cvpl.blocking import BlockingLevel, Rule, parse_levels
from party.audit.cvpl.errors import CvplError
from party.audit.cvpl.measures import progressive_bounds
from party.audit.cvpl.table import Table, read_csv

__all__ = [
    "BitRiskResult",
    "BlockingLevel",
    "CvplConfig",
    "CvplError",
    "CvplResult",
    "Rule",
    "Table",
    "assess_bits",
    "assess_tables",
    "parse_levels",
    "progressive_bounds",
    "read_csv",
]
