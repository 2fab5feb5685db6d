from django.urls import URLPattern, path

from jobs.weights import views

app_name = "model_files"
urlpatterns: list[URLPattern] = [
    path("model-files/nodes/<slug:name>/inventory/", views.inventory_action, name="inventory"),
    path("model-files/nodes/<slug:name>/download/", views.download_action, name="download"),
    path("model-files/lanes/<slug:name>/sync/", views.lane_sync_action, name="lane_sync"),
]
