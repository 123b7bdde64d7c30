from django.apps import AppConfig


class AllocationConfig(AppConfig):
    name = "allocation"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from allocation import receivers  # noqa: F401  (connects signal receivers)
        from allocation.models import Notification
        from inventory.secrets import sealed_field

        sealed_field(Notification, "secret")  # webhook signing keys rotate with the SSH keys
