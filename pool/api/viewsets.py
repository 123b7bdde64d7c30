"""The base viewset: read-only by default, authenticated, filtered and paginated."""

from __future__ import annotations

from rest_framework import viewsets


class ReadOnlyViewSet(viewsets.ReadOnlyModelViewSet):
    """Subclasses set queryset, serializer_class and filterset_class; actions add writes."""
