"""An API key's identity, in one place: the hash stored for its secret (the only form the
database keeps) and the names of its state in Redis (limits, in-flight count, revocation,
idempotency), which every gateway process and the key services compute the same way."""

from __future__ import annotations

import hashlib


def hash_secret(secret: str) -> str:
    """SHA-256 of the secret: the token has 256 bits of entropy, so a plain hash is enough."""
    return hashlib.sha256(secret.encode()).hexdigest()


def key_namespace(secret_hash: str) -> str:
    """Redis state is namespaced by a slice of the key's hash, not its database id: ids are
    reused when a database is restored or recreated while Redis keeps its keys."""
    return secret_hash[:16]


def key_names(prefix: str, namespace: str, idempotency_key: str) -> list[str]:
    base = f"{prefix}:gw:key:{namespace}"
    # The idempotency key is the client's string: namespaced by API key, length-capped.
    return [
        f"{prefix}:gw:revoked:{namespace}",
        f"{base}:idem:{idempotency_key[:200]}",
        f"{base}:rpm",
        f"{base}:tpm",
        f"{base}:inflight",
        f"{prefix}:gw:epoch",  # when this Redis's memory began (gateway.durable)
    ]
