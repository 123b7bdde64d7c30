from rest_framework import pagination


class LimitOffsetPagination(pagination.LimitOffsetPagination):
    """`?limit=&offset=` with a ceiling, so no client can ask for 16,000 rows at once."""

    default_limit = 100
    max_limit = 1000
