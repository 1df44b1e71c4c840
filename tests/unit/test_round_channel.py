"""party/round_channel.py: a node's round channels to its circuit's actors, on real sockets."""

from __future__ import annotations

import os
import socket
import threading
from typing import Any

import pytest

from party.round_channel import (
    ASK,
    TELL,
    ChannelClosed,
    ChannelServer,
    connect,
    receive,
)


def test_records_cross_whole_in_pieces_and_a_closed_side_is_told() -> None:
    a, b = socket.socketpair()
    with a, b:
        record = TELL.pack(7, 35, 1 << 33)
        a.sendall(record[:5])
        threading.Timer(0.05, lambda: a.sendall(record[5:])).start()
        assert TELL.unpack(receive(b, TELL.size)) == (7, 35, 1 << 33)
        a.sendall(ASK.pack(1, 2, 3, 4)[:4])
        a.close()
        with pytest.raises(ChannelClosed):
            receive(b, ASK.size)


def test_a_wait_is_called_while_nothing_comes_and_may_end_it(monkeypatch: Any) -> None:
    import party.round_channel as round_channel

    monkeypatch.setattr(round_channel, "WAIT_S", 0.01)
    a, b = socket.socketpair()
    waited = []

    def wait() -> None:
        waited.append(1)
        if len(waited) == 3:
            raise TimeoutError("given up")

    with a, b, pytest.raises(TimeoutError, match="given up"):
        receive(b, ASK.size, wait)
    assert len(waited) == 3


def test_the_node_takes_its_actors_connections_by_index_and_token(tmp_path: Any) -> None:
    """Connections in any order, each with its index; the socket is the owner's alone and goes
    with ``close``; both ends then carry records."""
    server = ChannelServer(str(tmp_path))
    assert os.stat(server.path).st_mode & 0o777 == 0o600
    ends = [connect(server.path, server.token, i) for i in (2, 0, 1)]
    server.accept(3, timeout=5)
    assert sorted(server.connections) == [0, 1, 2]
    ends[0].sendall(TELL.pack(4, 5, 6))  # actor 2's
    assert TELL.unpack(receive(server.connections[2], TELL.size)) == (4, 5, 6)
    server.connections[0].sendall(ASK.pack(1, 2, 3, 4))
    assert ASK.unpack(receive(ends[1], ASK.size)) == (1, 2, 3, 4)
    server.close()
    assert not os.path.exists(server.path)
    with pytest.raises(ChannelClosed):
        receive(ends[1], 1)
    for end in ends:
        end.close()


@pytest.mark.parametrize("wrong", ["token", "index", "twice", "silent"])
def test_a_connection_that_is_not_an_actors_is_refused(tmp_path: Any, wrong: str) -> None:
    server = ChannelServer(str(tmp_path))
    token = bytes(16) if wrong == "token" else server.token
    ends = []
    if wrong == "silent":  # connects, then says nothing
        ends.append(socket.socket(socket.AF_UNIX, socket.SOCK_STREAM))
        ends[0].connect(server.path)
    else:
        ends.append(connect(server.path, token, 5 if wrong == "index" else 0))
    if wrong == "twice":
        ends.append(connect(server.path, token, 0))
    with pytest.raises(OSError):
        server.accept(2, timeout=0.5)
    server.close()
    for end in ends:
        end.close()


def test_no_node_socket_is_an_os_error(tmp_path: Any) -> None:
    with pytest.raises(OSError):
        connect(str(tmp_path / "rounds.sock"), bytes(16), 0)
