"""Refuse a request whose path or query string carries NUL or other control characters,
before any view runs: PostgreSQL cannot store or compare a NUL in text (a lookup by such a
name raised a 500), and no name, slug or filter of this portal contains one."""

from __future__ import annotations

import re
from collections.abc import Callable

from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest, JsonResponse

CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
MESSAGE = "The path or query string contains a NUL or control character."


class RefuseControlCharacters:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if CONTROL.search(request.path) or any(
            CONTROL.search(key) or any(CONTROL.search(value) for value in values)
            for key, values in request.GET.lists()
        ):
            if request.path.startswith("/api/"):
                return JsonResponse({"detail": MESSAGE}, status=400)
            return HttpResponseBadRequest(MESSAGE)
        return self.get_response(request)
