"""What every app's API shares: role-checked auth, the error shape, and the one NinjaAPI
(/api/) built from the apps' routers by the project's URL module. Domain errors map to
HTTP here, in one place. Apps import this module; it imports no app."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from django.core.exceptions import PermissionDenied, RequestDataTooBig, ValidationError
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404
from django.views.csrf import csrf_failure as django_csrf_failure
from ninja import Field, NinjaAPI, Path, Router, Schema, Status
from ninja.errors import AuthenticationError
from ninja.security import SessionAuth
from pydantic import ConfigDict

from core.access_tokens import MAX_DAYS, access_token_create, access_token_revoke, access_token_user
from core.api_docs import OfflineSwagger
from core.models import PersonalAccessToken
from core.roles import Capability, require, role_required, user_can
from core.validators import INT64_MAX


class RoleAuth(SessionAuth):
    """Session auth (with CSRF on unsafe methods) or a personal access token (`Authorization:
    Bearer pat-…`, core.access_tokens: no cookie, so nothing for CSRF to protect), plus a
    capability: anonymous or a bad token → 401 (asked first: a request with no session has
    nothing for CSRF to protect, and "log in" is the answer it needs), a session without the
    CSRF token → 403, a user without the capability → 403."""

    def __init__(self, capability: Capability) -> None:
        super().__init__(csrf=True)
        self.capability = capability

    def __call__(self, request: HttpRequest) -> Any:
        header = request.headers.get("Authorization", "")
        if header[:7].lower() == "bearer ":
            user = access_token_user(header[7:].strip())
            if user is None:
                return None
            require(user, self.capability)
            request.user = user  # the operation acts as the token's owner
            return user
        if not request.user.is_authenticated:
            return None
        return super().__call__(request)

    def authenticate(self, request: HttpRequest, key: str | None) -> Any:
        user = super().authenticate(request, key)
        if user is None:
            return None
        require(user, self.capability)
        return user


UNAUTHENTICATED = ("Log in first (session cookie and CSRF token), or send a live personal access token: "
                   "Authorization: Bearer pat-…")


def csrf_failure(request: HttpRequest, reason: str = "") -> HttpResponse:
    """settings.CSRF_FAILURE_VIEW. Under /api/ the API's error shape: a request without a
    session is 401 "log in first" (what it needs; as RoleAuth answers), a session without the
    token 403 naming the check; elsewhere Django's page."""
    if request.path.startswith("/api/"):
        if not request.user.is_authenticated:
            return JsonResponse({"detail": UNAUTHENTICATED}, status=401)
        return JsonResponse({"detail": f"CSRF check failed: {reason}"}, status=403)
    return django_csrf_failure(request, reason=reason)


can_view = RoleAuth(Capability.VIEW)
can_edit_routing = RoleAuth(Capability.EDIT_ROUTING)
can_operate = RoleAuth(Capability.OPERATE)


class InSchema(Schema):
    """Every request body's base: an unknown field is refused (422 naming it) instead of
    silently dropped, so a misspelt field in a PATCH cannot answer 200 having changed nothing."""

    model_config = ConfigDict(extra="forbid")


class ErrorOut(Schema):
    detail: str | list[dict[str, Any]]


def validation_details(exc: ValidationError) -> list[dict[str, Any]]:
    """Domain validation (lane rules, job parameters): one entry per field and rule."""
    if hasattr(exc, "error_dict"):
        return [
            {"loc": ["body", field], "msg": message, "type": "value_error"}
            for field, messages in exc.message_dict.items()
            for message in messages
        ]
    return [{"loc": ["body"], "msg": message, "type": "value_error"} for message in exc.messages]


class MeOut(Schema):
    username: str
    roles: list[str]
    capabilities: list[str]


portal_router = Router(tags=["portal"])


@portal_router.get("/me", response=MeOut)
def me(request: HttpRequest) -> dict[str, Any]:
    user = request.auth  # type: ignore[attr-defined]
    return {
        "username": user.get_username(),
        "roles": sorted(group.name for group in user.groups.all()),
        "capabilities": [cap.value for cap in Capability if user_can(user, cap)],
    }


class AccessTokenIn(InSchema):
    name: str = Field(..., max_length=100)
    expires_in_days: int = Field(90, ge=1, le=MAX_DAYS)


class AccessTokenOut(Schema):
    id: int
    name: str
    prefix: str
    created_at: datetime
    expires_at: datetime
    last_used_at: datetime | None
    revoked_at: datetime | None


class AccessTokenCreatedOut(AccessTokenOut):
    secret: str  # shown once: only its hash is stored


def token_out(token: PersonalAccessToken) -> dict[str, Any]:
    return {name: getattr(token, name) for name in AccessTokenOut.model_fields}


@portal_router.get("/tokens", response=list[AccessTokenOut])
def tokens_list(request: HttpRequest) -> list[dict[str, Any]]:
    """Your personal access tokens (never their secrets)."""
    return [token_out(t) for t in PersonalAccessToken.objects.filter(user=request.auth)]  # type: ignore[attr-defined]


@portal_router.post("/tokens", response={201: AccessTokenCreatedOut})
def tokens_create(request: HttpRequest, payload: AccessTokenIn) -> Status[dict[str, Any]]:
    """A token acting as you, with your role, on /api/ (`Authorization: Bearer <secret>`)."""
    created = access_token_create(user=request.auth, **payload.dict())  # type: ignore[attr-defined]
    return Status(201, {**token_out(created.token), "secret": created.secret})


@portal_router.post("/tokens/{token_id}/revoke", response=AccessTokenOut)
def tokens_revoke(request: HttpRequest, token_id: int = Path(..., ge=1, le=INT64_MAX)) -> dict[str, Any]:
    """Your own token, or (admins) anyone's: refused from the next request on."""
    token = get_object_or_404(PersonalAccessToken, pk=token_id)
    return token_out(access_token_revoke(actor=request.auth, token=token))  # type: ignore[attr-defined]


ERROR_REF = {"$ref": "#/components/schemas/ErrorOut"}
ERROR_MEANINGS = {
    400: "Bad request: a NUL or control character in the path or query string.",
    401: "Not logged in (session cookie and CSRF token, or a personal access token as a bearer).",
    403: "Logged in, but the role lacks the capability.",
    404: "No such object.",
    409: "Conflict with the current state (e.g. the node is busy with another job).",
    413: "Request body larger than the limit (DATA_UPLOAD_MAX_MEMORY_SIZE).",
    422: "Invalid input: `detail` lists each field and the rule it broke.",
}


def documented_errors(method: str, path: str, operation: dict[str, Any]) -> list[int]:
    """The 4xx statuses an operation really answers, from its shape: every operation
    checks the session and the role (401, 403); a path or query parameter can name an
    object that does not exist (404); parameters or a body can be invalid (400 for
    control characters, 422 for the rules); a body can be too large (413)."""
    statuses = [401, 403]
    has_params = bool(operation.get("parameters"))
    has_body = "requestBody" in operation or method in ("post", "patch", "put")
    if "{" in path or has_params:
        statuses.append(404)
    if has_params or has_body:
        statuses += [400, 422]
    if has_body:
        statuses.append(413)
    return statuses


class PortalAPI(NinjaAPI):
    """The project's NinjaAPI: its OpenAPI schema documents, for every operation, the 4xx
    answers it gives, with the one error shape (ErrorOut)."""

    def get_openapi_schema(self, *args: Any, **kwargs: Any) -> Any:
        schema = super().get_openapi_schema(*args, **kwargs)
        components = schema.setdefault("components", {}).setdefault("schemas", {})
        components.setdefault("ErrorOut", ErrorOut.model_json_schema())
        for path, operations in schema["paths"].items():
            for method, operation in operations.items():
                responses = operation.setdefault("responses", {})
                for status in documented_errors(method, path, operation):
                    responses.setdefault(status, {"description": ERROR_MEANINGS[status],
                                                  "content": {"application/json": {"schema": ERROR_REF}}})
        return schema


def api_not_found(request: HttpRequest, rest: str = "") -> JsonResponse:
    """Any /api/ path that names no operation (e.g. /api/jobs/abc): JSON, like the rest."""
    return JsonResponse({"detail": "Not found."}, status=404)


def build_api(routers: Sequence[Router]) -> NinjaAPI:
    """The /api/ NinjaAPI: every role reads by default, routers tighten per operation."""
    api = PortalAPI(
        title="Spark Lanes Portal API", version="1", auth=can_view, urls_namespace="api",
        docs=OfflineSwagger(), docs_decorator=role_required(Capability.VIEW),
    )

    @api.exception_handler(RequestDataTooBig)
    def on_too_big(request: HttpRequest, exc: RequestDataTooBig) -> HttpResponse:
        return api.create_response(request, {"detail": "The request body is larger than the limit."}, status=413)

    @api.exception_handler(PermissionDenied)
    def on_permission_denied(request: HttpRequest, exc: PermissionDenied) -> HttpResponse:
        return api.create_response(request, {"detail": str(exc) or "Permission denied."}, status=403)

    @api.exception_handler(AuthenticationError)
    def on_unauthenticated(request: HttpRequest, exc: AuthenticationError) -> HttpResponse:
        return api.create_response(request, {"detail": UNAUTHENTICATED}, status=401)

    @api.exception_handler(ValidationError)
    def on_validation_error(request: HttpRequest, exc: ValidationError) -> HttpResponse:
        return api.create_response(request, {"detail": validation_details(exc)}, status=422)

    api.add_router("/", portal_router)
    for router in routers:
        api.add_router("/", router)
    return api
