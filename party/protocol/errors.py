"""Errors raised by the protocol engine (all PprlError subclasses, messages safe to log)."""

from __future__ import annotations

from party.errors import PprlError


class ProtocolError(PprlError, ValueError):
    """A protocol step got input that does not fit the agreed parameters or the run's state."""


class ParameterError(ProtocolError):
    """The protocol parameters are inconsistent (party list, filter length, thresholds, budget)."""


class StateError(ProtocolError):
    """A step was called out of order (e.g. compare before all shares arrived)."""


class ShareError(ProtocolError):
    """An incoming segment share is malformed (wrong source/target/width/shape/duplicates)."""


class RingError(ProtocolError):
    """An incoming ring message is malformed or out of order (wrong hop, unsorted or unknown sets)."""


class SummationError(RingError):
    """The unmasked sums are impossible (out of range): a party added wrong values or the ring was altered."""


class ResultsError(ProtocolError):
    """Results handed to a party do not belong to it or name unknown pseudonyms."""


class MemoryBudgetError(ProtocolError):
    """The surviving candidate sets would exceed the configured memory budget."""


class ComparisonCancelled(ProtocolError):
    """The comparison was cancelled through its threading.Event."""
