"""core.db.statements.compiled_values maps each column to the name values() gave it, whatever the
order of the annotations that feed it (a new annotation declared before others once shifted every
later value by one)."""
import pytest
from django.db.models import F, Value
from django.db.models.functions import Concat

from allocation.models import Team
from core.db.statements import compiled_values


def _query(name: str):
    # Declared in one order, selected in another: the row must follow values(), as Django's does.
    return (Team.objects.filter(name=name)
            .annotate(late=Value(7), shout=Concat(F("name"), Value("!")), early=F("pk"))
            .values("shout", "name", "early", "late"))


@pytest.mark.django_db
def test_compiled_rows_equal_the_querysets_own():
    team = Team.objects.create(name="alpha")
    Team.objects.create(name="beta")
    expected = list(_query("alpha"))
    for _ in range(2):  # the first call compiles, the second runs the kept template
        assert compiled_values("test_order", _query, name="alpha") == expected
    assert expected == [{"shout": "alpha!", "name": "alpha", "early": team.pk, "late": 7}]
    assert compiled_values("test_order", _query, name="beta")[0]["shout"] == "beta!"
