from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("deployments", "0014_deployment_autoscale"),
    ]

    operations = [
        migrations.AddField(
            model_name="deployment",
            name="routing",
            field=models.CharField(
                choices=[
                    ("least_outstanding", "Least outstanding requests"),
                    ("prefix", "Prompt prefix (cache-aware)"),
                    ("session", "Session affinity"),
                ],
                default="least_outstanding",
                max_length=24,
                verbose_name="routing",
            ),
        ),
    ]
