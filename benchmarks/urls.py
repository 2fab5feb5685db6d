from django.urls import URLPattern, URLResolver, path

from benchmarks import views

app_name = "benchmarks"
urlpatterns: list[URLPattern | URLResolver] = [
    path("benchmarks/", views.run_list_page, name="list"),
    path("benchmarks/start/", views.run_start, name="start"),
    path("benchmarks/compare/", views.compare_page, name="compare"),
    path("benchmarks/<int:job_id>/", views.run_page, name="run"),
    path("benchmarks/<int:job_id>/export.json", views.export_json_view, name="export_json"),
    path("benchmarks/<int:job_id>/export.csv", views.export_csv_view, name="export_csv"),
]
