from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("deployments", "0012_decision"),
    ]

    operations = [
        migrations.AddField(
            model_name="deployment",
            name="role",
            field=models.CharField(
                blank=True,
                choices=[("", "Plain"), ("prefill", "Prefill"), ("decode", "Decode")],
                default="",
                max_length=8,
                verbose_name="role",
            ),
        ),
        migrations.AddField(
            model_name="deployment",
            name="roles_wanted",
            field=models.JSONField(blank=True, default=dict),
        ),
    ]
