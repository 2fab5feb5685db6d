"""D5 through Django admin: every user change made there (the superuser flag included) is
audited with before/after; a deleted user's events keep a readable actor; jobs — and with
them their logs and benchmark runs — cannot be deleted there."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group, User
from django.core.management import call_command
from django.test import Client
from django.utils import timezone

from core.models import AuditEvent
from core.roles import Role
from core.services import user_set_role
from jobs.models import Job, JobKind, JobLogLine

pytestmark = pytest.mark.django_db


@pytest.fixture
def root_client() -> Client:
    call_command("createsuperuser", "--noinput", username="root", email="root@example.org", verbosity=0)
    client = Client()
    client.force_login(User.objects.get(username="root"))
    return client


def change_form(user: User, **fields: object) -> dict[str, object]:
    data: dict[str, object] = {
        "username": user.username, "first_name": "", "last_name": "", "email": user.email,
        "date_joined_0": user.date_joined.strftime("%Y-%m-%d"), "date_joined_1": "00:00:00",
        "groups": [group.pk for group in user.groups.all()], "_save": "Save",
    }
    if user.is_active:
        data["is_active"] = "on"
    data.update(fields)
    return data


def test_making_someone_superuser_in_django_admin_is_audited_before_after(root_client, viewer_user):
    response = root_client.post(f"/admin/auth/user/{viewer_user.pk}/change/",
                                change_form(viewer_user, is_superuser="on", is_staff="on"))
    assert response.status_code == 302, response.content.decode()[:2000]
    event = AuditEvent.objects.get(action="user.admin_change", object_id=str(viewer_user.pk))
    assert event.actor == User.objects.get(username="root")
    assert event.diff["is_superuser"] == [False, True] and event.diff["is_staff"] == [False, True]
    assert "role" not in event.diff  # still a viewer: the flag alone grants nothing (tests/core/test_superusers.py)


def test_a_group_change_in_django_admin_is_audited_as_a_role_change(root_client, viewer_user):
    admin_group = Group.objects.get(name=Role.ADMIN.value)
    response = root_client.post(f"/admin/auth/user/{viewer_user.pk}/change/",
                                change_form(viewer_user, groups=[admin_group.pk]))
    assert response.status_code == 302
    event = AuditEvent.objects.get(action="user.admin_change", object_id=str(viewer_user.pk))
    assert event.diff["role"] == ["viewer", "admin"]


def test_a_password_set_in_django_admin_is_audited_without_the_password(root_client, viewer_user):
    response = root_client.post(f"/admin/auth/user/{viewer_user.pk}/password/",
                                {"password1": "another-long-passphrase", "password2": "another-long-passphrase",
                                 "usable_password": "true"})
    assert response.status_code == 302, response.content.decode()[:2000]
    event = AuditEvent.objects.get(action="user.admin_change", object_id=str(viewer_user.pk))
    assert event.diff["password"] == ["(previous)", "(changed)"]
    assert "another-long-passphrase" not in str(event.diff) and "md5$" not in str(event.diff)


def test_deleting_a_user_in_django_admin_is_audited_and_their_events_keep_the_actor(root_client, admin_user,
                                                                                    viewer_user):
    user_set_role(actor=admin_user, user=viewer_user, role=Role.TEAM_LEAD)
    response = root_client.post(f"/admin/auth/user/{admin_user.pk}/delete/", {"post": "yes"})
    assert response.status_code == 302
    assert not User.objects.filter(pk=admin_user.pk).exists()
    deleted = AuditEvent.objects.get(action="user.delete", object_id=str(admin_user.pk))
    assert deleted.actor_name == "root" and deleted.diff["role"] == ["admin", None]
    earlier = AuditEvent.objects.get(action="user.role", object_id=str(viewer_user.pk))
    assert earlier.actor is None and earlier.actor_name == "ada-admin"  # readable after the account is gone
    assert "ada-admin" in root_client.get("/users/").content.decode()


def test_jobs_and_their_logs_cannot_be_deleted_in_django_admin(root_client):
    job = Job.objects.create(kind=JobKind.STATUS, params={"nodes": []})
    JobLogLine.objects.create(job=job, seq=1, text="evidence", created_at=timezone.now())
    assert root_client.get(f"/admin/jobs/job/{job.pk}/delete/").status_code == 403
    assert root_client.post(f"/admin/jobs/job/{job.pk}/delete/", {"post": "yes"}).status_code == 403
    bulk = root_client.post("/admin/jobs/job/", {"action": "delete_selected", "_selected_action": [job.pk],
                                                 "post": "yes"})
    assert bulk.status_code in (200, 302)
    assert Job.objects.filter(pk=job.pk).exists() and JobLogLine.objects.filter(job=job).exists()


def test_django_admin_keeps_the_last_active_admin(root_client):
    """The users page's rule holds there too: root is the only admin (createsuperuser)."""
    root = User.objects.get(username="root")
    page = root_client.post(f"/admin/auth/user/{root.pk}/change/", change_form(root, groups=[], is_superuser="on",
                                                                                is_staff="on"))
    assert page.status_code == 200 and "last active admin" in page.content.decode()
    assert root_client.post(f"/admin/auth/user/{root.pk}/delete/", {"post": "yes"}).status_code == 403
    assert User.objects.get(pk=root.pk).groups.filter(name=Role.ADMIN.value).exists()
    assert not AuditEvent.objects.filter(action__in=["user.admin_change", "user.delete"]).exists()


def test_django_admin_bulk_delete_keeps_the_last_active_admin(root_client, viewer_user):
    """The "delete selected" action with every active admin selected deletes nobody."""
    root = User.objects.get(username="root")
    page = root_client.post("/admin/auth/user/", {"action": "delete_selected", "post": "yes",
                                                  "_selected_action": [root.pk, viewer_user.pk]})
    assert page.status_code == 200 and "Cannot delete users" in page.content.decode()
    assert User.objects.filter(pk__in=[root.pk, viewer_user.pk]).count() == 2
    assert not AuditEvent.objects.filter(action="user.delete").exists()
    alone = root_client.post("/admin/auth/user/", {"action": "delete_selected", "post": "yes",
                                                   "_selected_action": [viewer_user.pk]})
    assert alone.status_code == 302 and not User.objects.filter(pk=viewer_user.pk).exists()
    assert AuditEvent.objects.filter(action="user.delete").count() == 1


def test_a_role_group_cannot_be_renamed_or_deleted_in_django_admin(root_client, viewer_user):
    """Renaming or deleting "viewer" would leave every viewer with no role, unaudited."""
    group = Group.objects.get(name=Role.VIEWER.value)
    renamed = root_client.post(f"/admin/auth/group/{group.pk}/change/", {"name": "people", "permissions": [], "_save": "Save"})
    assert renamed.status_code == 403
    deleted = root_client.post(f"/admin/auth/group/{group.pk}/delete/", {"post": "yes"})
    assert deleted.status_code == 403
    bulk = root_client.post("/admin/auth/group/", {"action": "delete_selected", "_selected_action": [group.pk], "post": "yes"})
    assert bulk.status_code == 200 and "Cannot delete group" in bulk.content.decode()
    assert Group.objects.filter(name=Role.VIEWER.value).exists()
    from core.roles import user_role
    assert user_role(User.objects.get(pk=viewer_user.pk)) is Role.VIEWER


def test_another_group_is_audited_when_created_changed_and_deleted(root_client):
    from django.contrib.auth.models import Permission

    permission = Permission.objects.get(codename="view_portal")
    assert root_client.post("/admin/auth/group/add/", {"name": "auditors", "permissions": [], "_save": "Save"}).status_code == 302
    group = Group.objects.get(name="auditors")
    assert AuditEvent.objects.get(action="group.create", object_id=str(group.pk)).diff["name"] == [None, "auditors"]
    changed = root_client.post(f"/admin/auth/group/{group.pk}/change/",
                               {"name": "auditors", "permissions": [permission.pk], "_save": "Save"})
    assert changed.status_code == 302
    event = AuditEvent.objects.get(action="group.change", object_id=str(group.pk))
    assert event.diff["permissions"] == [[], ["portal.view_portal"]]
    assert root_client.post(f"/admin/auth/group/{group.pk}/delete/", {"post": "yes"}).status_code == 302
    assert AuditEvent.objects.get(action="group.delete", object_id=str(group.pk)).actor == User.objects.get(username="root")
