from django.urls import URLPattern, URLResolver, path

from metrics import views

app_name = "metrics"
urlpatterns: list[URLPattern | URLResolver] = [
    path("metrics", views.prometheus_metrics, name="prometheus"),
    path("monitor/lanes/<slug:name>/", views.lane_charts, name="lane-charts"),
    path("monitor/nodes/<slug:name>/", views.node_charts, name="node-charts"),
    path("monitor/gateway/", views.gateway_page, name="gateway"),
    path("monitor/usage/", views.usage_page, name="usage"),
    path("monitor/usage/cost", views.cost_model_page, name="cost-model"),
    path("monitor/usage.csv", views.usage_page, {"fmt": "csv"}, name="usage-csv"),
    path("monitor/requests/", views.requests_page, name="requests"),
    path("monitor/requests.csv", views.requests_page, {"fmt": "csv"}, name="requests-csv"),
    path("monitor/requests/<int:pk>/", views.request_detail, name="request-detail"),
    path("gateway/requests/", views.requests_moved, name="requests-moved"),
    path("monitor/alerts/", views.alerts_page, name="alerts"),
    path("monitor/alerts/<int:pk>/ack", views.alert_ack, name="alert-ack"),
]
