from __future__ import annotations

from django.apps import AppConfig


class CoreConfig(AppConfig):
    """The shared kernel: API tokens and the helpers every app uses; imports nothing of the project."""

    name = "core"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.contrib.auth import get_user_model
        from django.db.models.signals import post_delete, post_save

        from core.models import ApiToken
        from core.tokens import clear_token_cache

        # A token revoked or a user deactivated through this process's ORM takes effect at once
        # here; other processes follow within the cache's TTL (core/tokens.py).
        for model in (get_user_model(), ApiToken):
            post_save.connect(clear_token_cache, sender=model, dispatch_uid=f"token-cache-{model.__name__}-save")
            post_delete.connect(clear_token_cache, sender=model, dispatch_uid=f"token-cache-{model.__name__}-delete")
