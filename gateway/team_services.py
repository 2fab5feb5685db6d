"""Gateway services for teams (create, change) and token budgets (set, reset, their use):
every change audited and sent to every gateway process at once."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.conf import settings
from django.contrib.auth.models import User
from django.core.exceptions import ValidationError
from django.db import transaction

from core.audit import audit_record
from core.redis_client import sync_redis
from core.roles import UserLike
from core.validators import has_control_characters
from gateway.budgets import budget_identity, budget_now, budget_window, budget_zone, count_name
from gateway.models import ApiKey, Budget, BudgetPeriod, Team
from gateway.services import gateway_invalidate, lanes_named
from lanes.models import Lane


def _team_snapshot(team: Team) -> dict[str, object]:
    return {"name": team.name, "allowed_lanes": sorted(team.allowed_lanes.values_list("name", flat=True)),
            "members": sorted(team.members.values_list("username", flat=True)), "fair_weight": team.fair_weight}


def _team_changes(*, team: Team, name: str | None, allowed_lanes: list[str] | None,
                  members: list[str] | None, fair_weight: int | None = None) -> tuple[list[Lane] | None, list[User] | None]:
    """Check a team's new fields (None = unchanged): ValidationError naming each bad field."""
    errors: dict[str, list[str]] = {}
    if fair_weight is not None:
        team.fair_weight = fair_weight
    if name is not None:
        team.name = name.strip()
        if not team.name:
            errors["name"] = ["Give the team a name."]
    lanes = users = None
    if allowed_lanes is not None:
        lanes, missing = lanes_named(allowed_lanes)
        if missing:
            errors["allowed_lanes"] = [f"Unknown lane(s): {', '.join(missing)}."]
    if members is not None:
        wanted = sorted(set(members))
        users = list(User.objects.filter(username__in=[m for m in wanted if not has_control_characters(m)]))
        unknown = sorted(set(wanted) - {user.username for user in users})
        if unknown:
            errors["members"] = [f"Unknown user(s): {', '.join(unknown)}."]
    try:
        team.full_clean(exclude=[*errors, "members", "allowed_lanes"], validate_unique=False)
    except ValidationError as exc:
        for field_name, messages in exc.message_dict.items():
            errors.setdefault(field_name, []).extend(messages)
    if (name is not None and "name" not in errors
            and Team.objects.filter(name__iexact=team.name).exclude(pk=team.pk).exists()):  # after its NUL check
        errors["name"] = [f"A team named `{team.name}` already exists."]
    if errors:
        raise ValidationError(errors)
    return lanes, users


def team_create(*, actor: UserLike, name: str, allowed_lanes: list[str] | None = None,
                members: list[str] | None = None, fair_weight: int | None = None) -> Team:
    team = Team()
    lanes, users = _team_changes(team=team, name=name or "", allowed_lanes=allowed_lanes or [], members=members or [],
                                 fair_weight=fair_weight)
    with transaction.atomic():
        team.save()
        team.allowed_lanes.set(lanes or [])
        team.members.set(users or [])
        audit_record(actor=actor, action="team.create", obj=team, after=_team_snapshot(team))
    return team


def team_update(*, actor: UserLike, team: Team, name: str | None = None, allowed_lanes: list[str] | None = None,
                members: list[str] | None = None, fair_weight: int | None = None) -> Team:
    """Change a team's name, lanes, members or share of a full lane (None = unchanged). New
    lanes or a new weight reach its keys at once: every gateway process drops its cached keys."""
    before = _team_snapshot(team)
    lanes, users = _team_changes(team=team, name=name, allowed_lanes=allowed_lanes, members=members,
                                 fair_weight=fair_weight)
    with transaction.atomic():
        team.save()
        if lanes is not None:
            team.allowed_lanes.set(lanes)
        if users is not None:
            team.members.set(users)
        after = _team_snapshot(team)
        if after != before:
            audit_record(actor=actor, action="team.update", obj=team, before=before, after=after)
    if before["allowed_lanes"] != after["allowed_lanes"] or before["fair_weight"] != after["fair_weight"]:
        transaction.on_commit(lambda: gateway_invalidate("all"))
    return team


def team_memberships_sync(*, user: User, wanted: set[str], managed: set[str],
                          system_name: str) -> list[str]:
    """Make the user a member of exactly the `wanted` teams among the `managed` ones (names;
    teams outside `managed` are left as admins set them). Each team changed is audited as
    team_update audits it, by `system_name`. Returns the managed names that name no team."""
    teams = {team.name: team for team in Team.objects.filter(name__in=managed)}
    with transaction.atomic():
        for name, team in sorted(teams.items()):
            member = team.members.filter(pk=user.pk).exists()
            if member == (name in wanted):
                continue
            before = _team_snapshot(team)
            if member:
                team.members.remove(user)
            else:
                team.members.add(user)
            audit_record(actor=None, action="team.update", obj=team, before=before, after=_team_snapshot(team),
                         system_name=system_name)
    return sorted(managed - set(teams))


def _budget_snapshot(budget: Budget) -> dict[str, object]:
    return {"period": budget.period, "prompt_tokens": budget.prompt_tokens,
            "completion_tokens": budget.completion_tokens, "total_tokens": budget.total_tokens}


def _budget_reaches_gateway(budget: Budget) -> None:
    """Every gateway process reloads the keys the budget applies to (a team's: all keys)."""
    message = f"key:{budget.key_id}" if budget.key_id else "all"
    transaction.on_commit(lambda: gateway_invalidate(message))


def budget_set(*, actor: UserLike, team: Team | int | None = None, key: ApiKey | int | None = None,
               period: str = "day", prompt_tokens: int | None = None, completion_tokens: int | None = None,
               total_tokens: int | None = None) -> Budget:
    """Create a team's or a key's budget for the period, or change it (raise, lower, lift a
    limit with None). It takes effect at the next request in every web process."""
    given_team, given_key = team is not None, key is not None
    errors: dict[str, list[str]] = {}
    team = Team.objects.filter(pk=team).first() if isinstance(team, int) else team
    key = ApiKey.objects.filter(pk=key).first() if isinstance(key, int) else key
    if given_team and team is None:
        errors["team"] = ["No such team."]
    elif given_key and key is None:
        errors["key"] = ["No such API key."]
    elif (team is None) == (key is None):
        errors["team"] = ["A budget is a team's or a key's: give exactly one of team and key."]
    if period not in BudgetPeriod.values:
        errors["period"] = [f"Must be one of {', '.join(BudgetPeriod.values)}."]
    limits = {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens, "total_tokens": total_tokens}
    if all(value is None for value in limits.values()):
        errors["total_tokens"] = ["Give at least one limit: prompt, completion or total tokens."]
    if errors:
        raise ValidationError(errors)
    budget = Budget.objects.filter(team=team, key=key, period=period).first() or Budget(team=team, key=key,
                                                                                         period=period)
    before = _budget_snapshot(budget) if budget.pk else None
    for name, value in limits.items():
        setattr(budget, name, value)
    budget.full_clean(exclude=["team", "key"], validate_unique=False, validate_constraints=False)
    with transaction.atomic():
        budget.save()
        audit_record(actor=actor, action="budget.create" if before is None else "budget.update", obj=budget,
                     before=before, after=_budget_snapshot(budget))
        _budget_reaches_gateway(budget)
    return budget


@dataclass(frozen=True)
class BudgetUse:
    budget: Budget
    window: str  # 2026-12-02 (a day) or 2026-12 (a month), in the budgets' time zone
    resets_at: datetime
    prompt_tokens: int
    completion_tokens: int

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    @property
    def used_share(self) -> float:
        """The largest share used of any of its limits (1.0 = used up)."""
        used, limit, _ = self.tightest
        return used / limit if limit else 0.0

    @property
    def tightest(self) -> tuple[int, int, str]:
        """(used, limit, what) of the limit most used."""
        pairs = [(used, limit, what) for used, limit, what in (
            (self.prompt_tokens, self.budget.prompt_tokens, "prompt tokens"),
            (self.completion_tokens, self.budget.completion_tokens, "completion tokens"),
            (self.total_tokens, self.budget.total_tokens, "total tokens")) if limit]
        return max(pairs, key=lambda pair: pair[0] / pair[1], default=(0, 0, "tokens"))

    @property
    def shown_pct(self) -> int:
        """The share as a bar shows it: 0 to 100."""
        return min(100, round(self.used_share * 100))


def _count_name(budget: Budget) -> tuple[str, str, datetime]:
    window, resets_at = budget_window(budget.period, budget_now(), budget_zone())
    return count_name(settings.REDIS_PREFIX, budget_identity(budget.pk, budget.created_at), window), window, resets_at


def budget_use(budget: Budget) -> BudgetUse:
    """What the budget's current window has used, as the gateway counted it."""
    name, window, resets_at = _count_name(budget)
    prompt, completion = sync_redis().hmget(name, ["p", "c"])
    return BudgetUse(budget=budget, window=window, resets_at=resets_at, prompt_tokens=int(prompt or 0),
                     completion_tokens=int(completion or 0))


def budget_reset(*, actor: UserLike, budget: Budget) -> BudgetUse:
    """Forget what the current window has used: the next request passes again, in every process."""
    before = budget_use(budget)
    sync_redis().delete(_count_name(budget)[0])
    audit_record(actor=actor, action="budget.reset", obj=budget,
                 before={"window": before.window, "prompt_tokens_used": before.prompt_tokens,
                         "completion_tokens_used": before.completion_tokens},
                 after={"window": before.window, "prompt_tokens_used": 0, "completion_tokens_used": 0})
    return budget_use(budget)
