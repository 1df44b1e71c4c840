"""The CVPL error type: bad inputs, columns, parameters (messages name file/column, never values)."""

from __future__ import annotations

from party.errors import PprlError


class CvplError(PprlError, ValueError):
    """A CVPL input or parameter problem; the message names the file, column or parameter."""
