from django.urls import URLPattern, URLResolver, path

from lanes import views

app_name = "lanes"
urlpatterns: list[URLPattern | URLResolver] = [
    path("nodes/", views.node_list_page, name="node_list"),
    path("nodes/new/", views.node_create_page, name="node_create"),
    path("nodes/<slug:name>/", views.node_detail_page, name="node_detail"),
    path("nodes/<slug:name>/edit/", views.node_edit_page, name="node_edit"),
    path("nodes/<slug:name>/delete/", views.node_delete_page, name="node_delete"),
    path("nodes/<slug:name>/host-key/", views.node_host_key_page, name="node_host_key"),
    path("lanes/", views.lane_list_page, name="lane_list"),
    path("lanes/new/", views.lane_create_page, name="lane_create"),
    path("lanes/<slug:name>/", views.lane_detail_page, name="lane_detail"),
    path("lanes/<slug:name>/edit/", views.lane_edit_page, name="lane_edit"),
    path("lanes/<slug:name>/delete/", views.lane_delete_page, name="lane_delete"),
    path("lanes/<slug:name>/restart-policy/", views.lane_restart_policy_page, name="lane_restart_policy"),
]
