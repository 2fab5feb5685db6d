"""The map from the identity provider's groups to the portal's roles and teams (sign-in with
OpenID Connect, portal.oidc). Set as JSON in PORTAL_OIDC_GROUP_MAP or a file named by
PORTAL_OIDC_GROUP_MAP_FILE (docs/configuration.md), checked when the portal starts:

    {"roles": {"spark-admins": "admin", "ml-leads": "team lead", "everyone": "viewer"},
     "teams": {"ml-search": ["Search"], "ml-agents": ["Agents", "Search"]}}

A person in several mapped groups gets the role with most capabilities and every mapped team.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from django.core.exceptions import ImproperlyConfigured

from core.roles import ROLE_CAPABILITIES, Role

SOURCE = "PORTAL_OIDC_GROUP_MAP"


@dataclass(frozen=True)
class GroupMap:
    roles: dict[str, Role] = field(default_factory=dict)
    teams: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def role_for(self, groups: Iterable[str]) -> Role | None:
        mine = {self.roles[group] for group in groups if group in self.roles}
        return next((role for role in ROLE_CAPABILITIES if role in mine), None)

    def teams_for(self, groups: Iterable[str]) -> set[str]:
        return {team for group in groups for team in self.teams.get(group, ())}

    @property
    def managed_teams(self) -> set[str]:
        """The teams whose membership the provider decides (every team the map names)."""
        return {team for names in self.teams.values() for team in names}


def _strings(value: object, where: str) -> tuple[str, ...]:
    names = [value] if isinstance(value, str) else value
    if not isinstance(names, list) or not names or not all(isinstance(n, str) and n.strip() for n in names):
        raise ImproperlyConfigured(f"{SOURCE}: {where}: must be a team name or a list of team names; got {value!r}")
    return tuple(name.strip() for name in names)


def parse_group_map(raw: Mapping[str, object]) -> GroupMap:
    """The checked map; ImproperlyConfigured naming the entry and the rule otherwise."""
    unknown = sorted(set(raw) - {"roles", "teams"})
    if unknown:
        raise ImproperlyConfigured(f"{SOURCE}: unknown key(s) {', '.join(unknown)}: only \"roles\" and \"teams\"")
    sections: dict[str, dict[str, object]] = {}
    for key in ("roles", "teams"):
        section = raw.get(key, {})
        if not isinstance(section, dict):
            raise ImproperlyConfigured(f"{SOURCE}: {key}: must be an object of group name to "
                                       f"{'role' if key == 'roles' else 'team names'}; got {section!r}")
        sections[key] = section
    roles: dict[str, Role] = {}
    allowed = ", ".join(repr(role.value) for role in Role)
    for group, role in sections["roles"].items():
        if role not in {r.value for r in Role}:
            raise ImproperlyConfigured(f"{SOURCE}: roles.{group}: must be one of {allowed}; got {role!r}")
        roles[group] = Role(role)
    teams = {group: _strings(names, f"teams.{group}") for group, names in sections["teams"].items()}
    return GroupMap(roles=roles, teams=teams)
