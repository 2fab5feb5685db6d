"""One opt-in for prompt storage (ApiKey.log_prompts): a database from before it (two flags,
prompts logged unredacted) upgrades with `migrate` — a key that captured for replay now
stores prompts, one that did neither still stores none, and the secrets already in the
request log are redacted; the gateway redacts a logged prompt before it is stored."""

from __future__ import annotations

import httpx
import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

from gateway.capture import REDACTED
from gateway.models import ApiKey, CapturedPrompt, RequestLog
from tests.conftest import wait_for
from tests.gateway.conftest import create_key

BEFORE = ("gateway", "0008_judgedcomparison")


@pytest.mark.django_db(transaction=True)
def test_the_two_flags_become_one_and_stored_prompts_are_redacted() -> None:
    executor = MigrationExecutor(connection)
    executor.migrate([BEFORE])
    executor.loader.build_graph()
    old = executor.loader.project_state([BEFORE]).apps
    OldKey, OldLog = old.get_model("gateway", "ApiKey"), old.get_model("gateway", "RequestLog")
    keys = {name: OldKey.objects.create(name=name, prefix=f"sk-{name}", secret_hash=(name * 64)[:64], **flags)
            for name, flags in (("capturing", {"capture_prompts": True}), ("logging", {"log_prompts": True}),
                                ("neither", {}))}
    OldLog.objects.create(request_id="req-old", key=keys["logging"], endpoint="chat.completions", lane="qwen",
                          status=200, latency_ms=1.0, created_at=timezone.now(),
                          prompt_text="deploy with password=hunter2hunter and key sk-live-4f9a8b7c6d5e4f3a2b1c")
    OldLog.objects.create(request_id="req-plain", key=keys["logging"], endpoint="chat.completions", lane="qwen",
                          status=200, latency_ms=1.0, created_at=timezone.now(), prompt_text="What is DNS?")

    MigrationExecutor(connection).migrate(MigrationExecutor(connection).loader.graph.leaf_nodes())

    flags = dict(ApiKey.objects.values_list("name", "log_prompts"))
    assert flags == {"capturing": True, "logging": True, "neither": False}
    text = RequestLog.objects.get(request_id="req-old").prompt_text
    assert "hunter2hunter" not in text and "sk-live-4f9a8b7c6d5e4f3a2b1c" not in text and REDACTED in text
    assert RequestLog.objects.get(request_id="req-plain").prompt_text == "What is DNS?"


def ask(gateway, secret: str, text: str) -> str:
    response = httpx.post(f"{gateway.base_url}/chat/completions", headers=gateway.headers(secret), timeout=30,
                          json={"model": "qwen", "messages": [{"role": "user", "content": text}], "max_tokens": 4})
    assert response.status_code == 200, response.text
    return response.headers["x-request-id"]


def test_the_request_log_and_the_replay_set_store_redacted_prompts_only_for_the_opt_in(gateway, key_owner):
    storing, _ = create_key(key_owner, name="storing", log_prompts=True)
    stored = ask(gateway, storing, "Why does login fail? DATABASE_URL=postgres://app:hunter2hunter@db/app")
    plain = ask(gateway, gateway.secret, "Why does login fail? password=hunter2hunter")
    row = wait_for(lambda: RequestLog.objects.filter(request_id=stored).first(), what="the log row")
    assert "hunter2hunter" not in row.prompt_text and REDACTED in row.prompt_text and "Why does login fail?" in row.prompt_text
    captured = wait_for(lambda: CapturedPrompt.objects.filter(request_id=stored).first(), what="the replay prompt")
    assert "hunter2hunter" not in captured.text
    other = wait_for(lambda: RequestLog.objects.filter(request_id=plain).first(), what="the plain key's log row")
    assert other.prompt_text == "" and not CapturedPrompt.objects.filter(request_id=plain).exists()  # opted out: nothing
