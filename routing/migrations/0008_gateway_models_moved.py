"""The gateway's models moved to the gateway app (gateway 0001): forgotten here in state
only, their tables and rows untouched."""

from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ('routing', '0007_request_log_replica'),
        ('gateway', '0001_initial'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.RemoveField(
                    model_name='apikey',
                    name='allowed_lanes',
                ),
                migrations.RemoveField(
                    model_name='apikey',
                    name='default_lane',
                ),
                migrations.RemoveField(
                    model_name='apikey',
                    name='owner',
                ),
                migrations.RemoveField(
                    model_name='requestlog',
                    name='key',
                ),
                migrations.DeleteModel(
                    name='ShadowSample',
                ),
                migrations.DeleteModel(
                    name='ApiKey',
                ),
                migrations.DeleteModel(
                    name='RequestLog',
                ),
            ],
            database_operations=[],
        ),
    ]
