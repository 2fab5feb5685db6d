"""Thin Celery tasks of the routing app: take ids, call a service."""

from __future__ import annotations

from celery import shared_task

from routing.services import TRAIN_TASK, router_version_train


@shared_task(name=TRAIN_TASK, ignore_result=True)
def train_router_version(version_id: int) -> None:
    router_version_train(version_id=version_id)
