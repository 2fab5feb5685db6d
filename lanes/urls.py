from django.urls import URLPattern, URLResolver

app_name = "lanes"
urlpatterns: list[URLPattern | URLResolver] = []
