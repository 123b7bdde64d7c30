"""The keys users log in to a lease's host with (`gpupool ssh`; allocation.services.shells writes
them, imported by allocation.models, where Django finds them).

A row is written before its key is put on the host and kept after it is taken back (`removed_at`):
a lease that ever had one may have shells running on its GPUs, so its end stops them before the
GPUs come back (allocation.workloads.binding), whether or not the key is still there."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone


class LeaseShellKey(models.Model):
    lease = models.ForeignKey("allocation.Lease", on_delete=models.CASCADE, related_name="shell_keys")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+")
    fingerprint = models.CharField(max_length=64, help_text="OpenSSH's SHA256 fingerprint of the public key")
    key_type = models.CharField(max_length=32)
    created_at = models.DateTimeField(default=timezone.now)
    removed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["id"]

    def __str__(self) -> str:
        return f"{self.key_type} {self.fingerprint} on lease {self.lease_id}"

    @property
    def key_id(self) -> str:
        """The key's name on the host (the comment of its authorized_keys line)."""
        return f"k{self.pk}"
