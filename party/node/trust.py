"""Which identities this party sends run data to: the ``[trust] peers`` allowlist check.

A party sends block digests, segments, ring sums and results only to identities it has agreed to
itself, in its own configuration (``[trust] peers``); the coordinator's word (the ``parties`` of a
proposal and the address directory) is never enough, and the coordinator's own identity is never a
valid recipient: it must not receive any run data (docs/network.md, "Trust boundaries").

``check_recipients`` is the one place this rule is applied: at Propose for the co-parties of a
``segments`` run, and by any other protocol mode for its own recipients (e.g. helper compute
nodes), before anything leaves the party. Its error, ``UntrustedRecipient``, maps to
PERMISSION_DENIED; the message names only configuration keys and node names that passed the
node-name syntax check, never other caller input.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

import grpc

from party.node.errors import NodeError

_NAME_RE = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")


class UntrustedRecipient(NodeError):
    """A run would send this party's data to an identity it has not agreed to."""

    code = grpc.StatusCode.PERMISSION_DENIED


def check_recipients(
    recipients: Iterable[str],
    *,
    own_name: str,
    coordinator_name: str,
    trusted: frozenset[str],
    role: str = "party",
) -> None:
    """Raise UntrustedRecipient unless every recipient (other than ``own_name``) is trusted.

    ``role`` says what the recipients are in the message ("party", "compute party", ...).
    Assumption: recipients are certificate identities, and every connection to them is made with
    mutual TLS and the expected identity as TLS target name, so trusting a name trusts exactly the
    holder of that certificate.
    """
    for name in recipients:
        if name == own_name:
            continue
        shown = name if _NAME_RE.match(name) else "a malformed name"
        if name == coordinator_name:
            raise UntrustedRecipient(
                f"the parameters name the coordinator's identity as a {role}; {own_name} never "
                "sends run data to the coordinator"
            )
        if name not in trusted:
            if not trusted:
                raise UntrustedRecipient(
                    f"{own_name} has no trusted peers configured ([trust] peers / "
                    "PPRL_TRUST_PEERS), so it sends run data to nobody"
                )
            raise UntrustedRecipient(
                f"the parameters name {shown} as a {role}, which is not in {own_name}'s "
                "[trust] peers"
            )
