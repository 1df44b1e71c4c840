"""The party node's transport security and its own health probe (no engine, audit or encoder imports).

`pprl-party health` runs every few seconds in a container's health check, so this module and what it
imports must stay light: grpc, the config loader and ``proto.transport``.
"""

from __future__ import annotations

from party.config import PartyConfig
from proto.transport import Security, check_health

# The health service name a node reports SERVING once its start-up warm-up (compiled loops loaded,
# encoding lanes started) is over: a readiness signal beside the liveness of service "".
WARM_SERVICE = "pprl.v1.Party.Warm"


def security_for(config: PartyConfig, insecure: bool) -> Security:
    return Security.for_node(config.name, insecure, config.tls.read)


async def health(config: PartyConfig, insecure: bool, service: str = "") -> str:
    """This node's health status name as seen through its own gRPC health service (``service``:
    "" for the node, ``WARM_SERVICE`` for its warm-up)."""
    security = security_for(config, insecure)
    address = config.advertise or config.listen
    if config.port_file is not None and config.port_file.exists():
        host = (config.advertise or config.listen).rpartition(":")[0]
        address = f"{host}:{config.port_file.read_text().strip()}"
    host, _, _ = address.rpartition(":")
    if host in ("0.0.0.0", "[::]"):
        address = "127.0.0.1:" + address.rpartition(":")[2]
    return await check_health(security, address, config.name, config.timeouts.rpc, service)
