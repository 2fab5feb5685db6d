"""The README's one table of who can do what is the code's truth: each cell is read and
checked against core.roles (user_can, may_use_django_admin) for a real account of each role,
and the table names every capability the code has."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.contrib.auth.models import User

from core.roles import ROLE_CAPABILITIES, Capability, Role, may_use_django_admin, user_can
from tests.conftest import make_user

pytestmark = pytest.mark.django_db

README = Path(__file__).resolve().parents[2] / "README.md"
HEADER = "| capability | admin | team lead | viewer | no role |"


def table() -> list[list[str]]:
    lines = README.read_text().splitlines()
    start = lines.index(HEADER) + 2  # past the header and its rule
    rows = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip("|").split("|")])
    return rows


def accounts(superuser: bool) -> dict[str, User]:
    users = {role.value: make_user(f"{role.name.lower()}-{superuser}", role) for role in ROLE_CAPABILITIES}
    users["no role"] = make_user(f"nobody-{superuser}", None)
    if superuser:
        User.objects.filter(pk__in=[u.pk for u in users.values()]).update(is_superuser=True)
        users = {column: User.objects.get(pk=user.pk) for column, user in users.items()}
    return users


def test_every_cell_of_the_readme_roles_table_is_what_the_code_decides():
    rows = table()
    columns = HEADER.strip("|").split("|")[1:]
    columns = [column.strip() for column in columns]
    plain, flagged = accounts(superuser=False), accounts(superuser=True)
    named = set()
    for label, *cells in rows:
        code = re.search(r"\(`(\w+)`\)", label)
        for column, cell in zip(columns, cells, strict=True):
            if code is not None:
                capability = Capability(code.group(1))
                named.add(capability)
                expected = cell == "yes"
                # the superuser flag changes nothing: the role alone decides
                assert user_can(plain[column], capability) is expected, (label, column)
                assert user_can(flagged[column], capability) is expected, (label, column, "superuser")
            else:
                assert "Django admin" in label
                assert may_use_django_admin(plain[column]) is False, column
                assert may_use_django_admin(flagged[column]) is (cell == "superuser only"), column
    assert named == set(Capability)
    assert columns[:-1] == [role.value for role in Role]
