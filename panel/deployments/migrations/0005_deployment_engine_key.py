from django.db import migrations, models


def forget_engine_endpoints(apps, schema_editor):
    """Deployments showed their engine's own address; users now call the gateway (<panel>/v1), which the
    pages and the API show when the row holds none (PANEL_URL unset)."""
    apps.get_model("deployments", "Deployment").objects.update(endpoint="")


class Migration(migrations.Migration):
    dependencies = [
        ("deployments", "0004_replicas_and_rollouts"),
    ]

    operations = [
        migrations.AddField(
            model_name="deployment",
            name="engine_key",
            field=models.TextField(blank=True, editable=False),
        ),
        migrations.RunPython(forget_engine_endpoints, migrations.RunPython.noop),
    ]
