from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("deployments", "0013_deployment_role"),
    ]

    operations = [
        migrations.AddField(
            model_name="deployment",
            name="autoscale",
            field=models.JSONField(blank=True, default=None, null=True, verbose_name="autoscale"),
        ),
    ]
