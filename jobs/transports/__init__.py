"""Transports: one interface (`Transport.run`), chosen per node (Node.transport)."""

from __future__ import annotations

from django.conf import settings

from jobs.transports.base import CommandResult, CommandTimeout, NodeEndpoint, Transport, TransportError
from jobs.transports.local import LocalTransport
from jobs.transports.ssh import SSHTransport
from lanes.crypto import CredentialError, decrypt_private_key
from lanes.models import Node

__all__ = [
    "CommandResult",
    "CommandTimeout",
    "LocalTransport",
    "NodeEndpoint",
    "SSHTransport",
    "Transport",
    "TransportError",
    "endpoint_for",
    "transport_for",
]


def _private_key(node: Node) -> str:
    """An unreadable key gives "": the transport then says the node has no usable key
    (never anything about the key itself)."""
    if node.transport != "ssh" or not node.ssh_private_key_encrypted:
        return ""
    try:
        return decrypt_private_key(node.ssh_private_key_encrypted)
    except CredentialError:
        return ""


def endpoint_for(node: Node) -> NodeEndpoint:
    return NodeEndpoint(
        name=node.name,
        address=node.address,
        transport=node.transport,
        ssh_port=node.ssh_port,
        ssh_user=node.ssh_user,
        ssh_private_key=_private_key(node),
        ssh_host_key=node.ssh_host_key,
        sim_dir=node.sim_dir,
    )


def transport_for(endpoint: NodeEndpoint) -> Transport:
    if endpoint.transport == "local":
        return LocalTransport(endpoint)
    return SSHTransport(
        endpoint,
        connect_timeout_s=settings.JOBS_SSH_CONNECT_TIMEOUT_S,
        keepalive_s=settings.JOBS_SSH_KEEPALIVE_S,
    )
