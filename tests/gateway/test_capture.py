"""Prompt capture for keys that opt in: secrets are redacted before anything is stored, the
text is capped, only the key's last prompts are kept, and a key that did not opt in keeps none."""

from __future__ import annotations

import httpx
import pytest

from gateway import capture
from gateway.capture import REDACTED, captured_text, redact_secrets
from gateway.models import CapturedPrompt
from gateway.services import captured_prompt_store
from tests.conftest import wait_for
from tests.gateway.conftest import Gateway, create_key

SECRETS = [
    ("use key sk-live-4f9a8b7c6d5e4f3a2b1c to call it", "sk-live-4f9a8b7c6d5e4f3a2b1c"),
    ("token ghp_abcdefghijklmnopqrstuvwxyz0123 in CI", "ghp_abcdefghijklmnopqrstuvwxyz0123"),
    ("aws AKIAIOSFODNN7EXAMPLE region eu", "AKIAIOSFODNN7EXAMPLE"),
    ("Authorization: Bearer abc.def-ghi_jkl~mno", "abc.def-ghi_jkl~mno"),
    ("DATABASE_URL=postgres://app:hunter2hunter@db:5432/app", "hunter2hunter"),
    ("password = 'correct-horse-battery'", "correct-horse-battery"),
    ('{"api_key": "A1B2C3D4E5F6G7H8"}', "A1B2C3D4E5F6G7H8"),
    ("jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U ok",
     "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"),
    ("-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA7\n-----END RSA PRIVATE KEY-----", "MIIEowIBAAKCAQEA7"),
]


@pytest.mark.parametrize(("text", "secret"), SECRETS)
def test_secrets_are_redacted(text, secret):
    redacted = redact_secrets(text)
    assert secret not in redacted and REDACTED in redacted


def test_ordinary_text_is_left_alone():
    text = "Refactor the password reset flow; the token bucket has 5 slots. What does HTTP 418 mean?"
    assert redact_secrets(text) == text


def test_a_long_prompt_is_capped_keeping_its_head_and_tail():
    text = "start " + "x" * 20_000 + " end?"
    kept = captured_text(text)
    assert len(kept) <= capture.CAPTURE_MAX_CHARS + 3 and kept.startswith("start ") and kept.endswith(" end?")


def test_redaction_happens_before_storage_and_only_the_last_prompts_are_kept(db, admin_user, monkeypatch):
    from gateway.services import api_key_create

    key = api_key_create(actor=admin_user, name="agent", log_prompts=True).key
    row = captured_prompt_store(key_id=key.pk, request_id="req-1", text="deploy with password=s3cr3t-value please")
    assert row is not None
    stored = CapturedPrompt.objects.get(pk=row.pk).text  # what the database holds
    assert "s3cr3t-value" not in stored and "password=" + REDACTED in stored
    monkeypatch.setattr("gateway.services.CAPTURE_PER_KEY", 3)
    for i in range(2, 7):
        captured_prompt_store(key_id=key.pk, request_id=f"req-{i}", text=f"prompt {i}")
    assert list(CapturedPrompt.objects.filter(key=key).values_list("request_id", flat=True)) == ["req-6", "req-5", "req-4"]


def ask(gateway: Gateway, secret: str, text: str) -> str:
    response = httpx.post(f"{gateway.base_url}/chat/completions", headers=gateway.headers(secret), timeout=30,
                          json={"model": "qwen", "messages": [{"role": "user", "content": text}], "max_tokens": 4})
    assert response.status_code == 200, response.text
    return response.headers["x-request-id"]


def test_the_gateway_captures_only_for_keys_that_opt_in(gateway, key_owner):
    capturing, _ = create_key(key_owner, name="capturing", log_prompts=True)
    captured = ask(gateway, capturing, "Review this: AWS key AKIAIOSFODNN7EXAMPLE is in settings.py")
    plain = ask(gateway, gateway.secret, "What is DNS?")
    row = wait_for(lambda: CapturedPrompt.objects.filter(request_id=captured).first(), what="the captured prompt")
    assert "AKIAIOSFODNN7EXAMPLE" not in row.text and REDACTED in row.text and row.lane == "qwen"
    # The log row of the plain key's request is written after its answer; no capture ever.
    from gateway.models import RequestLog

    wait_for(lambda: RequestLog.objects.filter(request_id=plain).exists(), what="the plain request's log row")
    assert not CapturedPrompt.objects.filter(request_id=plain).exists()
