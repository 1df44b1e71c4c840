"""Errors of the three-party computation (messages safe to log: no shares, keys or values)."""

from __future__ import annotations

from party.protocol.errors import ProtocolError


class MpcError(ProtocolError):
    """An mpc3 input, key or round message is malformed, or the computation is inconsistent."""


class MpcCancelled(MpcError):
    """The computation was cancelled through its threading.Event."""
