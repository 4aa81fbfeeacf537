import secrets

from django.db import migrations, models

import panel.nodes.models


def give_each_node_its_own_credential(apps, schema_editor):
    Node = apps.get_model("nodes", "Node")
    for node in Node.objects.all():
        node.credential_id = secrets.token_hex(16)
        node.save(update_fields=["credential_id"])


class Migration(migrations.Migration):
    dependencies = [("nodes", "0002_ssh_node_settings")]

    operations = [
        migrations.AddField(
            "node",
            "credential_id",
            models.CharField(default=panel.nodes.models.new_credential_id, editable=False, max_length=32),
        ),
        migrations.RunPython(give_each_node_its_own_credential, migrations.RunPython.noop),
        migrations.AddField("node", "agent_running", models.JSONField(blank=True, default=list)),
        migrations.AddField("node", "agent_done", models.JSONField(blank=True, default=list)),
    ]
