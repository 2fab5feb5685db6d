"""One opt-in for prompt storage: a key that captured prompts for replay (capture_prompts)
or logged them (log_prompts) now has log_prompts, which covers both; the prompt texts
already in the request log are redacted as every new one is (gateway.capture), so no
secret stored under the old rule outlives it."""

from django.db import migrations, models

from gateway.capture import redact_secrets

BATCH = 500


def merge_flags_and_redact(apps, schema_editor):
    ApiKey = apps.get_model("gateway", "ApiKey")
    RequestLog = apps.get_model("gateway", "RequestLog")
    ApiKey.objects.filter(capture_prompts=True).update(log_prompts=True)
    last = 0
    while True:
        rows = list(RequestLog.objects.filter(id__gt=last).exclude(prompt_text="").order_by("id")
                    .values_list("id", "prompt_text")[:BATCH])
        if not rows:
            return
        for row_id, text in rows:
            redacted = redact_secrets(text)
            if redacted != text:
                RequestLog.objects.filter(id=row_id).update(prompt_text=redacted)
        last = rows[-1][0]


class Migration(migrations.Migration):

    dependencies = [
        ("gateway", "0008_judgedcomparison"),
    ]

    operations = [
        migrations.RunPython(merge_flags_and_redact, migrations.RunPython.noop),
        migrations.RemoveField(
            model_name="apikey",
            name="capture_prompts",
        ),
        migrations.AlterField(
            model_name="apikey",
            name="log_prompts",
            field=models.BooleanField(default=False, help_text="Store this key's prompts (secrets redacted): in the request log, for router replay and judged comparison."),
        ),
    ]
