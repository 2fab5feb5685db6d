"""The durable trace of keyed requests (gateway.durable), without Redis: what a check finds,
what a release keeps, and that expired rows are purged."""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone

from gateway.durable import (
    ADMITTED,
    DONE,
    IN_FLIGHT,
    MISMATCH,
    keyed_request_admit,
    keyed_request_purge,
    keyed_request_release,
)
from gateway.models import KeyedRequest

FP, OTHER_FP = "a" * 32, "b" * 32


def admit(request_id: str, *, fingerprint: str = FP, check: bool = True) -> str:
    return keyed_request_admit(name="p:gw:key:k:idem:x", fingerprint=fingerprint, request_id=request_id,
                               lease_s=60, check=check)


def test_a_checked_admission_finds_the_earlier_request_in_flight_then_done(db: None) -> None:
    assert admit("req-1") == ADMITTED
    assert admit("req-2") == IN_FLIGHT
    assert admit("req-2", fingerprint=OTHER_FP) == MISMATCH
    keyed_request_release(name="p:gw:key:k:idem:x", request_id="req-2", keep=True, ttl_s=600)  # not its row
    assert admit("req-2") == IN_FLIGHT
    keyed_request_release(name="p:gw:key:k:idem:x", request_id="req-1", keep=True, ttl_s=600)
    assert admit("req-2") == DONE
    assert admit("req-3", check=False) == ADMITTED  # Redis vouches for it: the row is overwritten
    assert KeyedRequest.objects.get().request_id == "req-3"


def test_a_forgotten_or_expired_row_refuses_nothing_and_is_purged(db: None) -> None:
    assert admit("req-1") == ADMITTED
    keyed_request_release(name="p:gw:key:k:idem:x", request_id="req-1", keep=False, ttl_s=600)
    assert not KeyedRequest.objects.exists()
    assert admit("req-2") == ADMITTED
    KeyedRequest.objects.update(expires_at=timezone.now() - timedelta(seconds=1))
    assert admit("req-3") == ADMITTED  # an expired row is no evidence
    KeyedRequest.objects.update(expires_at=timezone.now() - timedelta(seconds=1))
    assert keyed_request_purge() == 1 and not KeyedRequest.objects.exists()
