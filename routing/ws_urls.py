from django.urls import URLPattern, path

from routing.consumers import RouterEvaluationConsumer

websocket_urlpatterns: list[URLPattern] = [
    path("ws/routing/versions/<int:number>/evaluation/", RouterEvaluationConsumer.as_asgi()),
]
