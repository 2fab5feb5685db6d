"""Register the portal as this provider's confidential client (authorization code, RS256)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser
from oauth2_provider.models import Application


class Command(BaseCommand):
    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--client-id", required=True)
        parser.add_argument("--client-secret", required=True)
        parser.add_argument("--redirect-uri", required=True)

    def handle(self, *args: Any, **options: Any) -> None:
        Application.objects.filter(client_id=options["client_id"]).delete()
        Application.objects.create(
            name="portal", client_id=options["client_id"], client_secret=options["client_secret"],
            client_type=Application.CLIENT_CONFIDENTIAL, authorization_grant_type=Application.GRANT_AUTHORIZATION_CODE,
            redirect_uris=options["redirect_uri"], algorithm=Application.RS256_ALGORITHM, skip_authorization=True)
