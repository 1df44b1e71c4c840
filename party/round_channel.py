"""The round channels of a circuit on the embedded cluster: a Unix socket per worker's actor.

On the embedded cluster (``party.cluster_mpc``) a batch's round payloads already cross in round
files; what is left of a round is telling the batch's worker that its incoming payload is there
and hearing back where its next round is. Through Dask that is an actor call: TLS, messages and
a hop to the actor's thread, about 0.7 ms of the worker's CPU a call. A round channel carries
the same in two fixed-size records over a Unix socket in the circuit's private folder (0700),
to a thread of the actor's own (``ROUNDS_THREAD``):

* ``ASK`` (node -> worker): batch, the incoming payload's offset and length in the batch's
  round file, the bytes the worker may write for its next round (``room``);
* ``TELL`` (worker -> node): batch, the next round's number and its length in the file; a
  number of -1: the step did not fit (a result, a round through Dask, an error) and is kept
  on the worker for the node to take through Dask.

A worker's connection opens with the circuit's random token and the actor's index, so the node
takes only its own actors' connections. The channel carries lengths and numbers only, never a
payload, share or key. Transport only: no circuit code here.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import select
import socket
import struct
from collections.abc import Callable

ASK = struct.Struct("<qqqq")
TELL = struct.Struct("<qqq")
_HELLO = struct.Struct("<16sq")  # the circuit's token, the actor's index
#: the name of the thread that serves an actor's channel (its CPU is counted with the worker's
#: tasks': ``party.cluster.serving_thread``)
ROUNDS_THREAD = "pprl-circuit-rounds"
#: seconds a node waits for a worker's reply before it looks at the run's cancel event and at
#: whether the worker is still in the cluster
WAIT_S = 0.5


class ChannelClosed(Exception):
    """The other side closed the channel (its process ended, or the circuit did)."""


def receive(sock: socket.socket, size: int, wait: Callable[[], None] | None = None) -> bytes:
    """Exactly ``size`` bytes from ``sock``; ``wait()`` is called every ``WAIT_S`` seconds
    without any (it may raise). ChannelClosed when the other side closed it first."""
    got = bytearray()
    while len(got) < size:
        if wait is not None and not select.select([sock], [], [], WAIT_S)[0]:
            wait()
            continue
        chunk = sock.recv(size - len(got))
        if not chunk:
            raise ChannelClosed
        got += chunk
    return bytes(got)


class ChannelServer:
    """The node's end: a listening socket ``rounds.sock`` in the circuit's private ``folder``
    and, once the actors have connected (``accept``), one connection per actor index."""

    def __init__(self, folder: str) -> None:
        self.path = os.path.join(folder, "rounds.sock")
        self.token = secrets.token_bytes(16)
        self._server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self._server.bind(self.path)
            os.chmod(self.path, 0o600)
            self._server.listen(64)
        except OSError:
            self._server.close()
            raise
        self.connections: dict[int, socket.socket] = {}

    def accept(self, actors: int, timeout: float) -> None:
        """Take the connections of actors 0 .. ``actors`` - 1 (each connected while it was
        made); OSError (``TimeoutError`` included) if one does not come within ``timeout``
        seconds, or a connection does not open with the token."""
        self._server.settimeout(timeout)
        while len(self.connections) < actors:
            conn, _ = self._server.accept()
            try:
                conn.settimeout(timeout)
                token, index = _HELLO.unpack(receive(conn, _HELLO.size))
                conn.settimeout(None)
            except (OSError, ChannelClosed):
                conn.close()
                raise OSError("a round channel closed before it said whose it is") from None
            if token != self.token or not 0 <= index < actors or index in self.connections:
                conn.close()
                raise OSError("a round channel opened without the circuit's token")
            self.connections[index] = conn

    def close(self) -> None:
        for conn in self.connections.values():
            with contextlib.suppress(OSError):
                conn.close()
        self.connections.clear()
        with contextlib.suppress(OSError):
            self._server.close()
        with contextlib.suppress(OSError):
            os.unlink(self.path)


def connect(path: str, token: bytes, index: int) -> socket.socket:
    """A worker's end of its actor's channel (OSError if the node's socket is not there)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(path)
        sock.sendall(_HELLO.pack(token, index))
    except OSError:
        sock.close()
        raise
    return sock
