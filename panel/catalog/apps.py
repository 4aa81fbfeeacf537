from django.apps import AppConfig


class CatalogConfig(AppConfig):
    name = "panel.catalog"
    label = "catalog"
