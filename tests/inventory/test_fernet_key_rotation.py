"""GPUPOOL_FERNET_KEY rotation: several keys (first encrypts, all decrypt); `rotate_fernet_key`
re-encrypts every stored secret with the first key, idempotently, all or nothing; afterwards the
old key can leave the environment and every secret still opens."""

from __future__ import annotations

from io import StringIO
from typing import Any

import pytest
from cryptography.fernet import Fernet
from django.core.management import CommandError, call_command

from inventory.models import Pool, Source
from inventory.secrets import decrypt, encrypt

pytestmark = pytest.mark.django_db

OLD, NEW = Fernet.generate_key().decode(), Fernet.generate_key().decode()


def _use(settings: Any, keys: str | None) -> None:
    settings.GPUPOOL = {**settings.GPUPOOL, "FERNET_KEY": keys}


def _sources(*secrets: str) -> list[Source]:
    pool = Pool.objects.create(name="p")
    return [Source.objects.create(name=f"lab{i}", kind="ssh", pool=pool, secret=encrypt(text) if text else "")
            for i, text in enumerate(secrets)]


def _rotate(*args: str) -> str:
    out = StringIO()
    call_command("rotate_fernet_key", *args, stdout=out)
    return out.getvalue()


def test_old_key_rotate_then_the_old_key_removed_still_decrypts(settings: Any) -> None:
    _use(settings, OLD)
    sources = _sources("PEM one", "PEM two", "")
    before = [s.secret for s in sources]
    _use(settings, f"{NEW},{OLD}")
    assert [decrypt(s.secret) for s in sources[:2]] == ["PEM one", "PEM two"]  # all keys decrypt
    assert _rotate().startswith("2 secret(s) re-encrypted")
    after = list(Source.objects.order_by("name").values_list("secret", flat=True))
    assert after[:2] != before[:2] and after[2] == ""
    assert _rotate().startswith("0 secret(s)")  # idempotent
    assert list(Source.objects.order_by("name").values_list("secret", flat=True)) == after
    _use(settings, NEW)  # the old key leaves the environment
    assert [decrypt(text) for text in after[:2]] == ["PEM one", "PEM two"]
    _use(settings, OLD)
    with pytest.raises(ValueError, match="cannot be decrypted"):
        decrypt(after[0])


def test_a_secret_no_key_opens_stops_the_rotation_and_changes_nothing(settings: Any) -> None:
    _use(settings, OLD)
    _sources("PEM one")
    _use(settings, Fernet.generate_key().decode())
    Source.objects.create(name="lab9", kind="ssh", pool=Pool.objects.get(), secret=encrypt("other"))
    kept = dict(Source.objects.values_list("name", "secret"))
    _use(settings, f"{NEW},{Fernet.generate_key().decode()}")
    with pytest.raises(CommandError, match=r"lab0.*none of the keys"):
        _rotate()
    assert dict(Source.objects.values_list("name", "secret")) == kept


def test_moving_an_embedded_install_onto_a_configured_key(settings: Any) -> None:
    _use(settings, None)  # embedded: the key derived from SECRET_KEY
    _sources("PEM")
    _use(settings, NEW)
    with pytest.raises(CommandError):
        _rotate()
    assert _rotate("--from-secret-key").startswith("1 secret(s)")
    assert decrypt(Source.objects.get().secret) == "PEM"


def test_a_malformed_key_is_named_by_position_never_shown(settings: Any) -> None:
    _use(settings, f"{NEW},not-a-key")
    with pytest.raises(CommandError) as refused:
        _rotate()
    assert "key 2 of 2" in str(refused.value) and "not-a-key" not in str(refused.value)


def test_webhook_signing_keys_rotate_with_the_ssh_keys(settings: Any) -> None:
    from allocation.models import Notification

    _use(settings, OLD)
    hook = Notification.objects.create(name="ops", kind="webhook", url="https://h/x", events=["lease.lost"],
                                       secret=encrypt("0123456789abcdef"))
    _use(settings, f"{NEW},{OLD}")
    assert _rotate().startswith("1 secret(s) re-encrypted")
    _use(settings, NEW)
    hook.refresh_from_db()
    assert decrypt(hook.secret) == "0123456789abcdef"
