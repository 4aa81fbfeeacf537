from django.db import migrations, models
from django.db.models import F


def number_existing_events(apps, schema_editor):
    # Events stored before attempts existed all came from one delivery, numbered as they are.
    apps.get_model("operations", "OperationEvent").objects.update(agent_seq=F("seq"))
    apps.get_model("operations", "Operation").objects.filter(last_seq__gt=0).update(attempt=1)
    # Operations from before the outbox were sent when they were created.
    apps.get_model("operations", "Operation").objects.update(sent_at=F("created"), dispatches=1)


class Migration(migrations.Migration):
    dependencies = [("operations", "0003_operation_kind_benchmark")]

    operations = [
        migrations.AddField("operation", "attempt", models.PositiveIntegerField(default=0)),
        migrations.AddField("operation", "task_name", models.CharField(blank=True, max_length=64)),
        migrations.AddField("operation", "task_kwargs", models.JSONField(blank=True, default=dict)),
        migrations.AddField("operation", "sent_at", models.DateTimeField(blank=True, null=True)),
        migrations.AddField("operation", "dispatches", models.PositiveIntegerField(default=0)),
        migrations.AddField("operation", "send_error", models.CharField(blank=True, max_length=255)),
        migrations.AddField("operationevent", "attempt", models.PositiveIntegerField(default=1)),
        migrations.AddField("operationevent", "agent_seq", models.PositiveIntegerField(default=0)),
        migrations.RunPython(number_existing_events, migrations.RunPython.noop),
        migrations.AddConstraint(
            "operationevent",
            models.UniqueConstraint(
                fields=("operation", "attempt", "agent_seq"), name="event_unique_agent_seq"
            ),
        ),
        migrations.AddIndex(
            "operation", models.Index(fields=["sent_at", "status"], name="operation_outbox")
        ),
    ]
