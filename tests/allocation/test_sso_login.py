"""Who a single sign-on becomes (allocation.services.sso): the account found by (issuer, subject),
linked at the first login, never taking over a local account; teams and the pool-admin role
following the groups at every login, and taking back only what single sign-on gave. The claims are
what a verified login carries (the provider itself is tests/frontend/test_sso_*'s)."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth import get_user_model

from allocation.models import AuditEvent, SsoMembership, Team
from allocation.services.sso import sso_login
from core.models import OidcIdentity
from core.oidc.claims import ClaimRefused

pytestmark = pytest.mark.django_db

ISSUER = "https://idp.example.org"
SSO = """
teams: [{name: vision}, {name: nlp}, {name: ops}]
sso: {teams: {ml-vision: vision, ml-nlp: nlp, ml-all: [vision, nlp]}, admins: [gpu-admins]}
"""


@pytest.fixture(autouse=True)
def mapping(apply_yaml: Any) -> None:
    apply_yaml(SSO, discover=False)


def claims(sub: str = "s-1", name: str = "alice", groups: Any = ("ml-vision",), **more: Any) -> dict[str, Any]:
    return {"sub": sub, "preferred_username": name, "groups": list(groups) if isinstance(groups, tuple) else groups,
            **more}


def teams_of(user: Any) -> set[str]:
    return set(user.teams.values_list("name", flat=True))


def test_a_first_login_creates_the_user_without_a_password_in_the_mapped_teams() -> None:
    login = sso_login(issuer=ISSUER, claims=claims(groups=("ml-all", "unmapped")), via="dashboard")
    assert login.created and login.user.username == "alice"
    assert not login.user.has_usable_password()
    assert teams_of(login.user) == {"vision", "nlp"}
    assert login.changes == ["+ user alice", "+ member of team nlp", "+ member of team vision"]
    event = AuditEvent.objects.get(action="sso.login")
    assert event.actor == "user:alice" and event.data["groups"] == ["ml-all", "unmapped"]


def test_later_logins_find_the_account_by_subject_not_by_name() -> None:
    first = sso_login(issuer=ISSUER, claims=claims(), via="dashboard").user
    renamed = sso_login(issuer=ISSUER, claims=claims(name="alice.smith"), via="device").user
    assert renamed.pk == first.pk and renamed.username == "alice"
    other = sso_login(issuer="https://other-idp.example.org", claims=claims(name="bob"), via="device").user
    assert other.pk != first.pk  # the same sub at another issuer is someone else


def test_a_user_made_by_the_config_is_linked(apply_yaml: Any) -> None:
    apply_yaml("teams: [{name: ops, members: [alice]}]\n", discover=False)
    login = sso_login(issuer=ISSUER, claims=claims(), via="dashboard")
    assert not login.created and teams_of(login.user) == {"ops", "vision"}


def test_a_local_account_with_a_password_is_refused() -> None:
    get_user_model().objects.create_user("alice", password="secret words")
    with pytest.raises(ClaimRefused, match="local gpupool account with a password"):
        sso_login(issuer=ISSUER, claims=claims(), via="dashboard")
    assert not OidcIdentity.objects.exists()


def test_a_name_already_linked_to_another_subject_is_refused() -> None:
    sso_login(issuer=ISSUER, claims=claims(sub="s-1"), via="dashboard")
    with pytest.raises(ClaimRefused, match="already linked to another single sign-on account"):
        sso_login(issuer=ISSUER, claims=claims(sub="s-2"), via="dashboard")


def test_a_disabled_account_is_refused() -> None:
    user = sso_login(issuer=ISSUER, claims=claims(), via="dashboard").user
    user.is_active = False
    user.save()
    with pytest.raises(ClaimRefused, match="disabled"):
        sso_login(issuer=ISSUER, claims=claims(), via="dashboard")


@pytest.mark.parametrize(("given", "message"), [
    ({"preferred_username": None}, "sent no 'preferred_username' claim"),
    ({"preferred_username": "alice smith"}, "is not a valid user name"),
    ({"sub": ""}, "named no subject"),
])
def test_claims_that_cannot_name_a_user_are_refused(given: dict[str, Any], message: str) -> None:
    with pytest.raises(ClaimRefused, match=message):
        sso_login(issuer=ISSUER, claims={**claims(), **given}, via="dashboard")


def test_an_unverified_email_does_not_name_a_user(apply_yaml: Any) -> None:
    apply_yaml("sso: {username_claim: email}\n", discover=False)
    with pytest.raises(ClaimRefused, match="has not verified"):
        sso_login(issuer=ISSUER, claims=claims(email="alice@example.org", email_verified=False), via="device")
    ok = sso_login(issuer=ISSUER, claims=claims(email="alice@example.org", email_verified=True), via="device")
    assert ok.user.username == "alice@example.org"


def test_groups_removed_at_the_provider_end_only_the_memberships_sso_made(make_user: Any) -> None:
    alice = sso_login(issuer=ISSUER, claims=claims(groups=("ml-vision",)), via="dashboard").user
    Team.objects.get(name="nlp").members.add(alice)  # by hand (the admin site)
    Team.objects.get(name="ops").members.add(alice)  # by hand, a team no group maps

    login = sso_login(issuer=ISSUER, claims=claims(groups=("ml-nlp",)), via="dashboard")
    assert login.changes == ["- member of team vision"]
    assert teams_of(alice) == {"nlp", "ops"}
    assert not SsoMembership.objects.filter(user=alice).exists()  # nlp was hers already: stays manual

    sso_login(issuer=ISSUER, claims=claims(groups=[]), via="dashboard")
    assert teams_of(alice) == {"nlp", "ops"}  # nothing of single sign-on's was left to take back


def test_a_membership_sso_made_and_an_admin_removed_comes_back_while_the_group_says_so() -> None:
    alice = sso_login(issuer=ISSUER, claims=claims(), via="dashboard").user
    Team.objects.get(name="vision").members.remove(alice)
    assert sso_login(issuer=ISSUER, claims=claims(), via="dashboard").changes == ["+ member of team vision"]
    assert SsoMembership.objects.filter(user=alice).count() == 1


def test_the_admin_group_gives_the_pool_admin_role_and_its_loss_takes_it_back() -> None:
    root = sso_login(issuer=ISSUER, claims=claims(name="root", groups=("gpu-admins",)), via="dashboard").user
    assert root.is_staff and not root.is_superuser
    login = sso_login(issuer=ISSUER, claims=claims(name="root", groups=()), via="dashboard")
    login.user.refresh_from_db()
    assert not login.user.is_staff and login.changes == ["- pool admin"]


def test_an_admin_made_by_hand_stays_one_whatever_the_groups(make_user: Any) -> None:
    make_user("root", admin=True)
    sso_login(issuer=ISSUER, claims=claims(name="root", groups=("gpu-admins",)), via="dashboard")
    login = sso_login(issuer=ISSUER, claims=claims(name="root", groups=()), via="dashboard")
    login.user.refresh_from_db()
    assert login.user.is_staff and login.changes == []


@pytest.mark.parametrize("groups", ["ml-vision", ["ml-vision", 7, None]])
def test_a_groups_claim_of_one_string_or_with_junk_still_counts(groups: Any) -> None:
    login = sso_login(issuer=ISSUER, claims=claims(groups=groups), via="dashboard")
    assert teams_of(login.user) == {"vision"}


def test_a_nested_groups_claim_is_followed(apply_yaml: Any) -> None:
    apply_yaml("sso: {groups_claim: realm_access.roles}\n", discover=False)
    given = {"sub": "s-1", "preferred_username": "alice", "realm_access": {"roles": ["ml-nlp"]}}
    assert teams_of(sso_login(issuer=ISSUER, claims=given, via="dashboard").user) == {"nlp"}


@pytest.mark.django_db(transaction=True)
def test_two_first_logins_of_one_person_at_once_end_in_one_account() -> None:
    import threading

    from django.db import connection

    results: list[Any] = []
    barrier = threading.Barrier(2)

    def log_in(via: str) -> None:
        try:
            barrier.wait()
            results.append(sso_login(issuer=ISSUER, claims=claims(), via=via).user.pk)
        except Exception as exc:  # the test reports whatever a thread met
            results.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=log_in, args=(via,)) for via in ("dashboard", "device")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert len(results) == 2 and results[0] == results[1], results
    assert OidcIdentity.objects.count() == 1
