from django.urls import URLPattern, URLResolver

app_name = "routing"
urlpatterns: list[URLPattern | URLResolver] = []
