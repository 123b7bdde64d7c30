"""List pages read filters, sort and page from the query string: bad values are dropped with a
reason the page shows, and links carry the query back without its defaults."""

from __future__ import annotations

from frontend.list_page import Filter, ListSpec

SPEC = ListSpec("things", (
    Filter("pool", "Pool", [("big", "big"), ("small", "small")], any_label="All pools"),
    Filter("q", "Search"),
), {"new": ("Newest first", ("-at",)), "old": ("Oldest first", ("at",))})


def test_good_values_are_kept_and_written_back_without_defaults() -> None:
    query = SPEC.parse({"pool": "small", "q": "  node-1 ", "sort": "old", "page": "3"})
    assert (dict(query.values), query.sort, query.page, query.problems) == (
        {"pool": "small", "q": "node-1"}, "old", 3, ())
    assert query.query_string() == "pool=small&q=node-1&sort=old&page=3"
    assert query.query_string(page=1, sort="new") == "pool=small&q=node-1"
    assert query.query_string(pool="") == "q=node-1&sort=old&page=3"  # "" clears a filter
    assert query["pool"] == "small" and query.ordering() == ("at",)
    assert SPEC.parse({}).query_string() == ""


def test_each_bad_value_is_dropped_and_named() -> None:
    query = SPEC.parse({"pool": "nowhere", "sort": "sideways", "page": "-2", "other": "kept out"})
    assert (dict(query.values), query.sort, query.page) == ({}, "new", 1)
    assert query.problems == (
        "Pool “nowhere” is not one of big, small: showing all pools.",
        "Sort “sideways” is not one of new, old: sorted by newest first.",
        "Page “-2” is not a page number: showing page 1.",
    )
    assert SPEC.parse({"page": "two"}).problems == ("Page “two” is not a page number: showing page 1.",)


def test_long_text_is_cut_and_a_template_reads_filters_by_name() -> None:
    query = SPEC.parse({"q": "x" * 500})
    assert query.get("q") == "x" * 128
    try:
        query["sort"]  # not a filter: a template falls through to the attribute
    except KeyError:
        pass
    else:
        raise AssertionError("query['sort'] must raise KeyError")
    assert [(f.name, f.value) for f in query.fields()] == [("pool", ""), ("q", "x" * 128)]
