"""Importing this module warms the encoder's numba loops (the pool's forkserver preloads it)."""

from party.encoding._numba_bits import warm_up

warm_up()
