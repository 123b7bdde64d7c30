"""Source secrets at rest (SSH private keys, and whatever a connector declares in
`secret_fields`): Fernet-encrypted with GPUPOOL_FERNET_KEY.

Embedded runs without the variable derive a key from SECRET_KEY so the demo works; production
sets GPUPOOL_FERNET_KEY (rotating SECRET_KEY must not make stored keys unreadable).
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Mapping
from typing import Any

from cryptography.fernet import Fernet, InvalidToken
from django.conf import settings

from agents.registry import connector_class


def _fernet() -> Fernet:
    key = settings.GPUPOOL["FERNET_KEY"]
    if not key:
        key = base64.urlsafe_b64encode(hashlib.sha256(settings.SECRET_KEY.encode()).digest()).decode()
    return Fernet(key.encode() if isinstance(key, str) else key)


def encrypt(plaintext: str) -> str:
    return _fernet().encrypt(plaintext.encode()).decode() if plaintext else ""


def decrypt(token: str) -> str:
    if not token:
        return ""
    try:
        return _fernet().decrypt(token.encode()).decode()
    except InvalidToken:
        raise ValueError("stored secret cannot be decrypted: was GPUPOOL_FERNET_KEY changed?") from None


# --- the secrets of a source ---------------------------------------------------------------------
# `Source.secret` holds one Fernet token for all of a source's secrets, the config keys its
# connector names in `secret_fields`. One field (ssh: private_key) is stored as its bare value,
# the format since the first migration; several are stored as one JSON object.


def source_secrets_split(kind: str, options: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """(options without secrets, the secrets given) of a config entry of `kind`; empty values are
    "not given". Raises agents' UnknownSourceKind for a kind no connector declares."""
    fields = connector_class(kind).secret_fields
    plain = {key: value for key, value in options.items() if key not in fields}
    secrets = {key: str(options[key]) for key in fields if options.get(key)}
    return plain, secrets


def source_secrets_seal(kind: str, secrets: Mapping[str, str]) -> str:
    """The `Source.secret` token for `secrets` ("" when there are none)."""
    fields = connector_class(kind).secret_fields
    if not secrets:
        return ""
    if len(fields) == 1:
        return encrypt(secrets.get(fields[0], ""))
    return encrypt(json.dumps(dict(secrets), sort_keys=True))


def source_secrets_open(kind: str, token: str) -> dict[str, str]:
    """The secrets stored in `token` as config keys and values ({} when none are stored)."""
    fields = connector_class(kind).secret_fields
    text = decrypt(token)
    if not text or not fields:
        return {}
    if len(fields) == 1:
        return {fields[0]: text}
    try:
        stored = json.loads(text)
    except ValueError:  # written while the kind had one secret field: read as none stored
        return {}
    return {key: str(stored[key]) for key in fields if isinstance(stored, dict) and key in stored}
