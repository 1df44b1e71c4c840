"""Importing this module warms the comparison tasks' and the mpc3 circuit's numba loops (the
embedded cluster's forkserver preloads it, as it preloads the encoder's)."""

from party.cluster_mpc import warm_up as warm_up_circuits
from party.cluster_pairs import warm_up

warm_up()
warm_up_circuits()
