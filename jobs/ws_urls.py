from django.urls import URLPattern, path

from jobs.consumers import JobLogConsumer

websocket_urlpatterns: list[URLPattern] = [
    path("ws/jobs/<int:job_id>/", JobLogConsumer.as_asgi()),
]
