"""Team-lead pages of the semantic router (/routing/)."""

from django.urls import URLPattern, URLResolver, path

from routing import views

app_name = "routing"
urlpatterns: list[URLPattern | URLResolver] = [
    path("routing/", views.prototypes_page, name="router-prototypes"),
    path("routing/prototypes/<int:prototype_id>/", views.prototype_edit, name="router-prototype"),
    path("routing/prototypes/<int:prototype_id>/delete", views.prototype_remove, name="router-prototype-delete"),
    path("routing/prototypes/import", views.prototypes_import_view, name="router-prototypes-import"),
    path("routing/prototypes/export", views.prototypes_export, name="router-prototypes-export"),
    path("routing/eval/", views.eval_page, name="router-eval"),
    path("routing/eval/import", views.eval_import_view, name="router-eval-import"),
    path("routing/playground/", views.playground, name="router-playground"),
    path("routing/playground/send", views.playground_send, name="router-playground-send"),
    path("routing/versions/", views.versions_page, name="router-versions"),
    path("routing/versions/revert", views.version_revert, name="router-revert"),
    path("routing/versions/<int:number>/", views.version_page, name="router-version"),
    path("routing/versions/<int:number>/train", views.version_train, name="router-train"),
    path("routing/versions/<int:number>/evaluate", views.version_evaluate, name="router-evaluate"),
    path("routing/versions/<int:number>/evaluate/run", views.version_evaluate_run, name="router-evaluate-run"),
    path("routing/versions/<int:number>/publish", views.version_publish, name="router-publish"),
]
