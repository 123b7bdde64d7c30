"""Source secrets at rest (SSH private keys, and whatever a connector declares in
`secret_fields`): Fernet-encrypted with GPUPOOL_FERNET_KEY.

GPUPOOL_FERNET_KEY may hold several comma-separated keys: the first encrypts, every one decrypts
(cryptography's MultiFernet). To rotate: put a new key first, keep the old ones after it, run
`manage.py rotate_fernet_key` (every stored secret re-encrypted with the first key), then drop the
old keys. Embedded runs without the variable derive a key from SECRET_KEY so the demo works;
production sets GPUPOOL_FERNET_KEY (rotating SECRET_KEY must not make stored keys unreadable).
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Mapping
from typing import Any

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import transaction

from agents.registry import connector_class
from inventory.models import Source


def _derived_key() -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(settings.SECRET_KEY.encode()).digest()).decode()


def _keys(*, with_secret_key: bool = False) -> list[Fernet]:
    """The configured keys, first one first (the SECRET_KEY-derived one when none is configured;
    also last when `with_secret_key`, to move an embedded install onto GPUPOOL_FERNET_KEY).
    Raises ImproperlyConfigured naming the bad key's position, never its value."""
    configured = [key.strip() for key in (settings.GPUPOOL["FERNET_KEY"] or "").split(",") if key.strip()]
    keys = configured or [_derived_key()]
    if with_secret_key and _derived_key() not in keys:
        keys.append(_derived_key())
    fernets = []
    for position, key in enumerate(keys, start=1):
        try:
            fernets.append(Fernet(key.encode()))
        except ValueError:
            raise ImproperlyConfigured(f"GPUPOOL_FERNET_KEY: key {position} of {len(keys)} is not a Fernet key "
                                       "(32 url-safe base64-encoded bytes)") from None
    return fernets


def _fernet() -> MultiFernet:
    return MultiFernet(_keys())


def encrypt(plaintext: str) -> str:
    return _fernet().encrypt(plaintext.encode()).decode() if plaintext else ""


def decrypt(token: str) -> str:
    if not token:
        return ""
    try:
        return _fernet().decrypt(token.encode()).decode()
    except InvalidToken:
        raise ValueError("stored secret cannot be decrypted: was GPUPOOL_FERNET_KEY changed?") from None


# Other apps' Fernet-encrypted columns, rotated with the sources' secrets: (model, field, the field
# that names a row in an error). An app registers its own in AppConfig.ready (`sealed_field`), so
# that this module needs to import nothing of it.
SEALED_FIELDS: list[tuple[Any, str, str]] = []


def sealed_field(model: Any, field: str, label: str = "name") -> None:
    """Have `secrets_rotate` re-encrypt `model.field` too (once per model and field)."""
    if (model, field, label) not in SEALED_FIELDS:
        SEALED_FIELDS.append((model, field, label))


def secrets_rotate(*, with_secret_key: bool = False) -> int:
    """Re-encrypt every stored secret (the sources', and every `SEALED_FIELDS` column) with the
    first key of GPUPOOL_FERNET_KEY, in one transaction; returns how many rows changed.
    Idempotent: a secret the first key already opens is left as it is (0 on a second run).
    `with_secret_key` also tries the SECRET_KEY-derived key (an embedded install moving to
    GPUPOOL_FERNET_KEY). Raises ValueError naming the first row no key opens; nothing is changed
    then."""
    keys = _keys(with_secret_key=with_secret_key)
    primary, every = keys[0], MultiFernet(keys)
    changed = 0
    with transaction.atomic():
        for model, field, label in [(Source, "secret", "name"), *SEALED_FIELDS]:
            for row in model.objects.select_for_update().exclude(**{field: ""}).order_by("pk"):
                token = getattr(row, field).encode()
                try:
                    primary.decrypt(token)
                    continue
                except InvalidToken:
                    pass
                try:
                    setattr(row, field, every.rotate(token).decode())
                except InvalidToken:
                    what = model._meta.verbose_name
                    raise ValueError(f"the {field} of {what} {getattr(row, label)!r} opens with none of the keys; "
                                     "nothing was changed") from None
                row.save(update_fields=[field])
                changed += 1
    return changed


# --- the secrets of a source ---------------------------------------------------------------------
# `Source.secret` holds one Fernet token for all of a source's secrets, the config keys its
# connector names in `secret_fields`. One field (ssh: private_key) is stored as its bare value,
# the format since the first migration; several are stored as one JSON object. A field may be a
# path into a nested entry (`telemetry.token`: the `token` of the source's `telemetry` mapping).


def source_secrets_split(kind: str, options: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """(options without secrets, the secrets given, by field) of a config entry of `kind`; empty
    values are "not given". `options` is not changed. Raises agents' UnknownSourceKind for a kind
    no connector declares."""
    fields = connector_class(kind).secret_fields
    plain = dict(options)
    secrets: dict[str, str] = {}
    for path in fields:
        holder, key = _holder(plain, path)
        if holder is None:
            continue
        value = holder.pop(key, None)
        if value:
            secrets[path] = str(value)
    return plain, secrets


def source_secrets_merge(config: Mapping[str, Any], secrets: Mapping[str, str]) -> dict[str, Any]:
    """`config` with `secrets` (by field, as `source_secrets_open` gives them) put back where they
    came from; a nested field whose entry is no longer in the config is dropped."""
    merged = dict(config)
    for path, value in secrets.items():
        holder, key = _holder(merged, path)
        if holder is not None:
            holder[key] = value
    return merged


def _holder(config: dict[str, Any], path: str) -> tuple[dict[str, Any] | None, str]:
    """(the mapping of `config` that holds the field `path`, the field's own key); None when an
    entry on the way is not a mapping. Each mapping on the way is replaced by a copy in `config`
    (itself a copy), so the caller's nested entries are never changed."""
    *parents, key = path.split(".")
    holder = config
    for name in parents:
        entry = holder.get(name)
        if not isinstance(entry, Mapping):
            return None, key
        holder[name] = dict(entry)
        holder = holder[name]
    return holder, key


def source_secrets_seal(kind: str, secrets: Mapping[str, str]) -> str:
    """The `Source.secret` token for `secrets` ("" when there are none)."""
    fields = connector_class(kind).secret_fields
    if not secrets:
        return ""
    if len(fields) == 1:
        return encrypt(secrets.get(fields[0], ""))
    return encrypt(json.dumps(dict(secrets), sort_keys=True))


def source_secrets_open(kind: str, token: str) -> dict[str, str]:
    """The secrets stored in `token` by field ({} when none are stored)."""
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
