"""CVPL (Khvatov & Neyman, arXiv 2602.11015): geometric linkage-risk assessment of a release."""

from party.audit.cvpl.bitrisk import BitRiskResult, assess_bits
from party.audit.cvpl.errors import CvplError

__all__ = ["BitRiskResult", "CvplError", "assess_bits"]
