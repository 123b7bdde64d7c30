"""What every list page of the dashboard shares (fleet, queue, leases, audit): filters and a sort
read from the query string, a page cut in the database, counts over the whole result, and the
query string again for links, so a filtered page is a link that can be shared.

A page describes its filters once (`ListSpec`); the template draws the form from that description
(`partials/list_filters.html`) and the pager from the `ListPage` (`partials/list_pager.html`).
Bad parameters never fail the page: each is dropped, and the page says which and why
(`ListQuery.problems`), so an old bookmark still opens.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar
from urllib.parse import urlencode

from django.db.models import QuerySet

T = TypeVar("T")
PER_PAGE = 50
MAX_TEXT = 128  # longer free text is cut: no name or search term is longer


@dataclass(frozen=True)
class Filter:
    """One filter of a list: a choice (`choices` given) or free text (`choices` None)."""

    name: str
    label: str
    choices: Sequence[tuple[str, str]] | None = None  # (value, label)
    any_label: str = "Any"  # the empty choice
    placeholder: str = ""


@dataclass(frozen=True)
class ListSpec:
    """The filters and sorts of one list page; the first sort is the default."""

    name: str  # prefix of the element ids ("fleet" → #fleet-pool, #fleet-next)
    filters: tuple[Filter, ...]
    sorts: Mapping[str, tuple[str, Sequence[Any]]]  # key → (label, order_by arguments)
    per_page: int = PER_PAGE

    @property
    def default_sort(self) -> str:
        return next(iter(self.sorts))

    def parse(self, params: Mapping[str, str]) -> ListQuery:
        """The query the parameters ask for; a value that is not allowed is dropped and named
        in `problems` (unknown parameters are ignored: links may carry others)."""
        values: dict[str, str] = {}
        problems: list[str] = []
        for spec in self.filters:
            value = params.get(spec.name, "").strip()[:MAX_TEXT]
            if not value:
                continue
            if spec.choices is not None and value not in {v for v, _ in spec.choices}:
                problems.append(f"{spec.label} “{value}” is not one of {_some(spec.choices)}: "
                                f"showing {spec.any_label.lower()}.")
                continue
            values[spec.name] = value
        sort = params.get("sort", "") or self.default_sort
        if sort not in self.sorts:
            problems.append(f"Sort “{sort[:MAX_TEXT]}” is not one of {_some(self.sort_choices())}: "
                            f"sorted by {self.sorts[self.default_sort][0].lower()}.")
            sort = self.default_sort
        page = _page_number(params.get("page", ""), problems)
        return ListQuery(self, values, sort, page, tuple(problems))

    def sort_choices(self) -> list[tuple[str, str]]:
        return [(key, label) for key, (label, _) in self.sorts.items()]


def _some(choices: Sequence[tuple[str, str]], shown: int = 8) -> str:
    values = [v for v, _ in choices]
    listed = ", ".join(values[:shown])
    return listed + (f" … ({len(values)} in all)" if len(values) > shown else "")


def _page_number(raw: str, problems: list[str]) -> int:
    if not raw:
        return 1
    try:
        page = int(raw)
    except ValueError:
        page = 0
    if page < 1:
        problems.append(f"Page “{raw[:MAX_TEXT]}” is not a page number: showing page 1.")
        return 1
    return page


@dataclass(frozen=True)
class BoundFilter:
    """A filter with the value the query gives it, as the form draws it."""

    spec: Filter
    value: str

    def __getattr__(self, name: str) -> Any:
        if name == "spec":  # not set yet (copy, unpickling): no recursion
            raise AttributeError(name)
        return getattr(self.spec, name)


@dataclass(frozen=True)
class ListQuery:
    """Filters given (only those with a value), sort and page. In templates `query.pool` is the
    value of filter `pool` ("" when not given)."""

    spec: ListSpec
    values: Mapping[str, str]
    sort: str
    page: int = 1
    problems: tuple[str, ...] = ()

    def __getitem__(self, name: str) -> str:
        # Only filter names: a template's `query.sort` must fall through to the attribute.
        if name not in {f.name for f in self.spec.filters}:
            raise KeyError(name)
        return self.values.get(name, "")

    def get(self, name: str) -> str:
        return self.values.get(name, "")

    @property
    def filtered(self) -> bool:
        return bool(self.values)

    def fields(self) -> list[BoundFilter]:
        return [BoundFilter(f, self.get(f.name)) for f in self.spec.filters]

    def sort_choices(self) -> list[tuple[str, str]]:
        return self.spec.sort_choices()

    def ordering(self) -> Sequence[Any]:
        return self.spec.sorts[self.sort][1]

    def without(self, *names: str) -> ListQuery:
        """This query with the filters `names` dropped (counts "by state" ignore the state asked)."""
        return ListQuery(self.spec, {k: v for k, v in self.values.items() if k not in names},
                         self.sort, self.page)

    def query_string(self, **changes: Any) -> str:
        """This query with `changes` (a filter, `sort` or `page`) as a query string, defaults left
        out ("" when everything is a default)."""
        values = {**self.values, **{k: str(v) for k, v in changes.items() if k not in ("sort", "page")}}
        pairs = [(f.name, values[f.name]) for f in self.spec.filters if values.get(f.name)]
        sort = changes.get("sort", self.sort)
        if sort != self.spec.default_sort:
            pairs.append(("sort", sort))
        page = int(changes.get("page", self.page))
        if page > 1:
            pairs.append(("page", str(page)))
        return urlencode(pairs)


@dataclass(frozen=True)
class LegendItem:
    """One count of a page's legend, as a link that filters the list by it (or, when that
    filter is on already, clears it)."""

    value: str
    label: str
    count: int
    href: str
    current: bool


@dataclass
class ListPage(Generic[T]):
    """One page of a list: its rows and where it lies in the whole result."""

    rows: list[T]
    total: int  # rows matching the filters, on every page
    page: int
    pages: int
    query: ListQuery
    counts: list[tuple[str, str, int]] = field(default_factory=list)  # (value, label, n) over the result
    counted_by: str = ""  # the filter whose values `counts` counts
    totals: dict[str, int] = field(default_factory=dict)  # other sums over the result, by name

    @property
    def first(self) -> int:
        """1-based position of the first row shown (0 when none)."""
        return (self.page - 1) * self.query.spec.per_page + 1 if self.rows else 0

    @property
    def last(self) -> int:
        return (self.page - 1) * self.query.spec.per_page + len(self.rows)

    @property
    def qs(self) -> str:
        """The query string of this very page (what the live fragment polls)."""
        return self.query.query_string(page=self.page)

    @property
    def prev_qs(self) -> str:
        return self.query.query_string(page=self.page - 1)

    @property
    def next_qs(self) -> str:
        return self.query.query_string(page=self.page + 1)

    @property
    def legend(self) -> list[LegendItem]:
        current = self.query.get(self.counted_by)
        return [LegendItem(value, label, n, "?" + self.query.query_string(
            page=1, **{self.counted_by: "" if value == current else value}), value == current)
            for value, label, n in self.counts]


def paginate(rows: QuerySet[Any], query: ListQuery,
             load: Callable[[QuerySet[Any]], list[T]] = list) -> ListPage[T]:
    """The page `query` asks for, of `rows` (filtered and ordered already): one COUNT and one
    LIMIT/OFFSET query, whatever the size of the result. A page past the end shows the last one.
    `load` turns the page's slice into rows (default: the model instances)."""
    per_page = query.spec.per_page
    total = rows.count()
    pages = max(1, math.ceil(total / per_page))
    page = min(query.page, pages)
    start = (page - 1) * per_page
    return ListPage(load(rows[start:start + per_page]), total, page, pages, query)


def list_context(page: ListPage[Any], **extra: Any) -> dict[str, Any]:
    """What the list partials read: the page, its query, and the rows as `rows`."""
    return {"page": page, "query": page.query, "rows": page.rows, "list_name": page.query.spec.name,
            **extra}
