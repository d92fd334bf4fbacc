"""quotas.services' rules that neither face lets a user reach by accident: the tenant of a quota's
workspaces, root quotas, and bindings left across tenants by the console before the service."""

import threading

import pytest
from django.db import connection, connections, transaction

from jobs.cycle_lock import hold_cycle_lock
from quotas import services
from quotas.models import Node, Quota, Workspace

pytestmark = pytest.mark.django_db


def test_a_quota_serves_only_workspaces_of_its_own_tenant(alice, mallory):
    nlp = Quota.objects.get(name="nlp-team")
    red_team = Workspace.objects.get(name="red-team")
    with pytest.raises(services.QuotaRefused) as refused:
        services.update_quota(alice, nlp.quota_id, workspace_ids=(red_team.pk,))
    assert "not workspaces of the tenant demo" in refused.value.errors["workspaces"]
    assert not nlp.workspaces.filter(pk=red_team.pk).exists()


def test_only_staff_make_a_root_quota_even_by_moving_one_to_the_top(bob_admin):
    nlp = Quota.objects.get(name="nlp-team")
    with pytest.raises(services.QuotaForbidden):
        services.update_quota(bob_admin, nlp.quota_id, parent_id=None)
    assert Quota.objects.get(pk=nlp.pk).parent.name == "ml-platform"


def test_a_binding_across_tenants_gives_neither_sight_nor_rights(bob_admin, mallory):
    red = Quota.objects.get(name="red-quota")
    red.workspaces.add(Workspace.objects.get(name="ml-research"))  # as the old console allowed
    assert not services.visible_quotas(bob_admin).filter(pk=red.pk).exists()
    assert not services.can_administer(bob_admin, red)
    assert not services.administered_quotas(bob_admin).filter(pk=red.pk).exists()


def test_a_staff_user_without_a_workspace_is_told_where_a_root_quota_would_go(alice):
    alice.memberships.all().delete()
    with pytest.raises(services.QuotaRefused) as refused:
        services.create_quota(alice, services.QuotaRequest(name="orphan"))
    assert "join a workspace" in refused.value.errors["parent"]
    assert not Quota.objects.filter(name="orphan").exists()


@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(connection.vendor != "postgresql", reason="SQLite runs one writer at a time anyway")
def test_a_node_moves_only_between_schedule_cycles(alice):
    """A cycle could otherwise bind a pod to a node between the check that none holds it and its move."""
    cv = Quota.objects.get(name="cv-team")
    keep = set(Node.objects.filter(quota=cv).order_by("pk").values_list("pk", flat=True)[:1])
    cycle_holds, cycle_done, moved = threading.Event(), threading.Event(), threading.Event()

    def a_cycle():
        try:
            with transaction.atomic():
                hold_cycle_lock()
                cycle_holds.set()
                cycle_done.wait(10)
        finally:
            connections.close_all()

    def a_move():
        try:
            services.update_quota(alice, cv.quota_id, node_ids=keep)
            moved.set()
        finally:
            connections.close_all()

    threads = [threading.Thread(target=a_cycle), threading.Thread(target=a_move)]
    threads[0].start()
    assert cycle_holds.wait(10)
    threads[1].start()
    assert not moved.wait(0.5)  # the move waits for the cycle
    cycle_done.set()
    assert moved.wait(10)
    for t in threads:
        t.join(10)
    assert set(Node.objects.filter(quota=cv).values_list("pk", flat=True)) == keep
