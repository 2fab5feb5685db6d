from django.urls import URLPattern, URLResolver, path

from jobs import views

app_name = "jobs"
urlpatterns: list[URLPattern | URLResolver] = [
    path("jobs/", views.job_list_page, name="list"),
    path("jobs/<int:job_id>/", views.job_detail_page, name="detail"),
    path("jobs/<int:job_id>/log.txt", views.job_log_download, name="log_download"),
    path("jobs/<int:job_id>/cancel/", views.job_cancel_action, name="cancel"),
    path("jobs/<int:job_id>/relaunch/", views.job_relaunch_action, name="relaunch"),
    path("jobs/lanes/<slug:name>/<slug:action>/", views.lane_action, name="lane_action"),
    path("jobs/nodes/<slug:name>/network-check/", views.node_network_check_action, name="node_network_check"),
    path("jobs/fabric/", views.fabric_action, name="fabric_action"),
    path("jobs/fabric/results/<int:result_id>/", views.fabric_result_page, name="fabric_result"),
    path("jobs/fabric/watchdogs/<slug:name>/", views.lane_watchdog_action, name="lane_watchdog"),
]
