"""Test hooks and the outgoing-bytes recorder of a party node (inactive unless configured).

Hidden test hooks, read from the environment at node start (documented in docs/network.md; they
exist only so integration tests can hit a stage deterministically):

- ``PPRL_TEST_PAUSE_AT=<point>`` with ``PPRL_TEST_PAUSE_FILE=<path>``: when the node reaches
  ``<point>`` ("exchange": after sending its block digests, before sending segments; "ring":
  before passing the ring on; "compare": before the local comparison; "circuit": mode mpc3, at a
  compute party holding its keys and inputs, before its first round) it creates ``<path>`` and
  waits there until the run is aborted. One-shot: later runs of the same process do not pause.
- ``PPRL_TEST_CAPTURE_FILE=<path>``: every serialized message the node sends (requests to peers
  and the coordinator, responses it returns) is appended to ``<path>``, so a test can check that no
  plaintext quasi-identifier ever leaves the node.
- ``PPRL_TEST_FORGE_PARTY=<name>``: the node writes ``<name>`` into the ``party`` field of every
  message of its Execute streams (progress and summary), as a co-party forging another party's
  report would; the coordinator must attribute messages to the stream's identity instead.
"""

from __future__ import annotations

import os
import pathlib
import threading
from collections.abc import Mapping
from typing import Any

from google.protobuf.message import Message


class Hooks:
    def __init__(self, env: Mapping[str, str] | None = None):
        env = os.environ if env is None else env
        self.pause_at = env.get("PPRL_TEST_PAUSE_AT") or None
        pause_file = env.get("PPRL_TEST_PAUSE_FILE")
        self.pause_file = pathlib.Path(pause_file) if pause_file else None
        capture = env.get("PPRL_TEST_CAPTURE_FILE")
        self.capture_file = pathlib.Path(capture) if capture else None
        self.forge_party = env.get("PPRL_TEST_FORGE_PARTY") or None
        self._lock = threading.Lock()
        self.bytes_sent = 0

    def should_pause(self, point: str) -> bool:
        """True (once per process) when the node reaches the configured pause point."""
        if self.pause_at == point:
            self.pause_at = None  # one-shot: later runs of this process go through
            if self.pause_file is not None:
                self.pause_file.write_text(point)
            return True
        return False

    def forge_execute(self, message: Any) -> None:
        """With PPRL_TEST_FORGE_PARTY set, claim another party in an ExecuteResponse (in place)."""
        if self.forge_party is None:
            return
        message.progress.party = self.forge_party
        if message.HasField("summary"):
            message.summary.party = self.forge_party
            message.summary.matches = 424242

    def sent(self, message: Message) -> None:
        """Count (and, when capturing, record) one outgoing message."""
        if self.capture_file is None:
            size = message.ByteSize()  # no second serialization on the hot path
            with self._lock:
                self.bytes_sent += size
            return
        data = message.SerializeToString()
        with self._lock:
            self.bytes_sent += len(data)
            with self.capture_file.open("ab") as fh:
                fh.write(data)
