"""Thin Celery tasks of the routing app: take ids, call a service."""

from __future__ import annotations

from celery import shared_task

from routing.evaluation_runs import EVALUATE_TASK, router_evaluation_run
from routing.services import TRAIN_TASK, router_version_train


@shared_task(name=TRAIN_TASK, ignore_result=True)
def train_router_version(version_id: int) -> None:
    router_version_train(version_id=version_id)


@shared_task(name=EVALUATE_TASK, ignore_result=True)
def evaluate_router_version(evaluation_id: int) -> None:
    router_evaluation_run(evaluation_id=evaluation_id)
