"""The API docs page (/api/docs): Swagger UI from the pinned `swagger-ui-dist` package,
served by the portal like Bootstrap. django-ninja's own template loads its bundle from a
CDN when ninja is not an installed app, which the portal never does."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from ninja.openapi.docs import Swagger

if TYPE_CHECKING:
    from ninja import NinjaAPI

# validatorUrl: Swagger UI would otherwise send the schema to validator.swagger.io.
SWAGGER_SETTINGS: dict[str, Any] = {"validatorUrl": None, "tryItOutEnabled": False, "docExpansion": "list"}


class OfflineSwagger(Swagger):
    template = "portal/api_docs.html"

    def __init__(self) -> None:
        super().__init__(settings=SWAGGER_SETTINGS)

    def render_page(self, request: HttpRequest, api: NinjaAPI, **kwargs: Any) -> HttpResponse:
        config = {**self.settings, "url": self.get_openapi_url(api, kwargs)}
        return render(request, self.template, {"swagger_settings": config, "api": api})
