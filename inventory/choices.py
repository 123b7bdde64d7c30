"""Status vocabularies of the inventory, shared by models, filters and serializers."""

from django.db import models


class HostState(models.TextChoices):
    READY = "ready", "Ready"
    CORDONED = "cordoned", "Cordoned"
    DRAINING = "draining", "Draining"
    OFFLINE = "offline", "Offline"


class AdminState(models.TextChoices):
    """What an admin asked for; combined with what the source reports into Host.state."""

    NONE = "", "None"
    CORDONED = "cordoned", "Cordoned"
    DRAINING = "draining", "Draining"


class GpuState(models.TextChoices):
    FREE = "free", "Free"
    LEASED = "leased", "Leased"
    CORDONED = "cordoned", "Cordoned"
    OFFLINE = "offline", "Offline"
    UNHEALTHY = "unhealthy", "Unhealthy"
    FOREIGN = "foreign", "Foreign"


class Health(models.TextChoices):
    OK = "ok", "OK"
    UNHEALTHY = "unhealthy", "Unhealthy"
