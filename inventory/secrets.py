"""SSH private keys at rest: Fernet-encrypted with GPUPOOL_FERNET_KEY.

Embedded runs without the variable derive a key from SECRET_KEY so the demo works; production
sets GPUPOOL_FERNET_KEY (rotating SECRET_KEY must not make stored keys unreadable).
"""

from __future__ import annotations

import base64
import hashlib

from cryptography.fernet import Fernet, InvalidToken
from django.conf import settings


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
