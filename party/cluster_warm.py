"""Importing this module warms the comparison tasks' numba loops (the embedded cluster's
forkserver preloads it, as it preloads the encoder's)."""

from party.cluster_pairs import warm_up

warm_up()
