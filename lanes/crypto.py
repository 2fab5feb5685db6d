"""SSH credentials of nodes: private keys encrypted at rest with Fernet
(settings.CREDENTIALS_KEY, from the environment), host keys pinned as one OpenSSH
public-key line. A private key is never shown back and never logged: error messages
here say what is wrong without quoting the key.
"""

from __future__ import annotations

import asyncssh
from cryptography.fernet import Fernet, InvalidToken
from django.conf import settings


class CredentialError(ValueError):
    """A key that cannot be used; the message never contains the key."""


def _fernet() -> Fernet:
    return Fernet(settings.CREDENTIALS_KEY.encode())


def validate_private_key(text: str) -> None:
    """Refuse anything asyncssh cannot load without a passphrase (the worker has none)."""
    try:
        asyncssh.import_private_key(text.strip() + "\n")
    except asyncssh.KeyEncryptionError:
        raise CredentialError("The private key is passphrase-protected: store an unencrypted key.") from None
    except (asyncssh.KeyImportError, ValueError, TypeError):
        raise CredentialError("Not a private key asyncssh can read (OpenSSH or PEM format expected).") from None


def encrypt_private_key(text: str) -> str:
    validate_private_key(text)
    return _fernet().encrypt((text.strip() + "\n").encode()).decode()


def decrypt_private_key(token: str) -> str:
    try:
        return _fernet().decrypt(token.encode()).decode()
    except InvalidToken:
        raise CredentialError(
            "The stored private key cannot be decrypted with PORTAL_CREDENTIALS_KEY (was the key changed?)."
        ) from None


def normalize_host_key(line: str) -> str:
    """One OpenSSH public key line ("ssh-ed25519 AAAA… [comment]") → "type base64"."""
    words = line.strip().split()
    if len(words) < 2:
        raise CredentialError("Enter the host's public key line, e.g. 'ssh-ed25519 AAAAC3Nz…'.")
    key_line = f"{words[0]} {words[1]}"
    try:
        key = asyncssh.import_public_key(key_line)
    except (asyncssh.KeyImportError, ValueError, TypeError):
        raise CredentialError("Not an OpenSSH public host key line.") from None
    if key.algorithm.decode() != words[0]:
        raise CredentialError("The key type does not match the key data.")
    return key_line


def host_key_fingerprint(line: str) -> str:
    if not line:
        return ""
    return str(asyncssh.import_public_key(line).get_fingerprint("sha256"))


def encrypt_secret(text: str) -> str:
    """A secret container env value, encrypted with the same Fernet key as SSH keys."""
    return _fernet().encrypt(text.encode()).decode()


def decrypt_secret(token: str) -> str:
    try:
        return _fernet().decrypt(token.encode()).decode()
    except InvalidToken:
        raise CredentialError(
            "A stored secret cannot be decrypted with PORTAL_CREDENTIALS_KEY (was the key changed?)."
        ) from None
