from django.urls import path

from panel.gateway import pages

app_name = "gateway"
urlpatterns = [
    path("", pages.usage_page, name="usage"),
    path("export.csv", pages.usage_csv, name="usage-csv"),
]
