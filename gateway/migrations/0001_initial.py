"""The gateway's models came out of the routing app: their tables (routing_apikey,
routing_requestlog, routing_shadowsample and the keys' allowed lanes) already exist and keep
every row. This migration only tells Django's state that the gateway owns them now; the
routing app's 0008 forgets them the same way. A new database gets the tables from routing's
earlier migrations, as before."""

import core.validators
import django.core.validators
import django.db.models.deletion
import django.utils.timezone
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):

    initial = True

    dependencies = [
        ('lanes', '0007_lane_replicas'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
        ('routing', '0007_request_log_replica'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name='ApiKey',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('name', models.CharField(max_length=100, validators=[core.validators.NoControlCharacters()])),
                        ('prefix', models.CharField(db_index=True, help_text='First characters of the secret, shown to tell keys apart.', max_length=24)),
                        ('secret_hash', models.CharField(max_length=64, unique=True)),
                        ('rpm_limit', models.PositiveIntegerField(blank=True, help_text='Requests per minute; empty = no limit.', null=True, validators=[django.core.validators.MinValueValidator(1, message='Enter a whole number from 1 to 2,147,483,647.'), django.core.validators.MaxValueValidator(2147483647, message='Enter a whole number from 1 to 2,147,483,647.')])),
                        ('tpm_limit', models.PositiveIntegerField(blank=True, help_text='Tokens per minute; empty = no limit.', null=True, validators=[django.core.validators.MinValueValidator(1, message='Enter a whole number from 1 to 2,147,483,647.'), django.core.validators.MaxValueValidator(2147483647, message='Enter a whole number from 1 to 2,147,483,647.')])),
                        ('max_parallel', models.PositiveIntegerField(blank=True, help_text='Requests in flight; empty = no limit.', null=True, validators=[django.core.validators.MinValueValidator(1, message='Enter a whole number from 1 to 2,147,483,647.'), django.core.validators.MaxValueValidator(2147483647, message='Enter a whole number from 1 to 2,147,483,647.')])),
                        ('log_prompts', models.BooleanField(default=False, help_text='Store prompt text in the request log.')),
                        ('expires_at', models.DateTimeField(blank=True, null=True)),
                        ('revoked_at', models.DateTimeField(blank=True, null=True)),
                        ('created_at', models.DateTimeField(auto_now_add=True)),
                        ('allowed_lanes', models.ManyToManyField(blank=True, related_name='api_keys', to='lanes.lane')),
                        ('default_lane', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to='lanes.lane')),
                        ('owner', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='api_keys', to=settings.AUTH_USER_MODEL)),
                    ],
                    options={
                        'db_table': 'routing_apikey',
                        'ordering': ['-created_at', '-id'],
                    },
                ),
                migrations.CreateModel(
                    name='MirrorSample',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('created_at', models.DateTimeField(db_index=True, default=django.utils.timezone.now)),
                        ('request_id', models.CharField(max_length=40)),
                        ('lane', models.CharField(max_length=63)),
                        ('external_model', models.CharField(max_length=200)),
                        ('local_latency_ms', models.FloatField()),
                        ('external_latency_ms', models.FloatField(blank=True, null=True)),
                        ('local_chars', models.PositiveIntegerField()),
                        ('external_chars', models.PositiveIntegerField(blank=True, null=True)),
                        ('local_completion_tokens', models.PositiveIntegerField(blank=True, null=True)),
                        ('external_completion_tokens', models.PositiveIntegerField(blank=True, null=True)),
                        ('divergence', models.FloatField(blank=True, help_text='0 = same words, 1 = nothing in common.', null=True)),
                        ('error', models.CharField(blank=True, max_length=300)),
                        ('key', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to='gateway.apikey')),
                    ],
                    options={
                        'db_table': 'routing_shadowsample',
                        'ordering': ['-id'],
                    },
                ),
                migrations.CreateModel(
                    name='RequestLog',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('created_at', models.DateTimeField(db_index=True, default=django.utils.timezone.now)),
                        ('request_id', models.CharField(max_length=40)),
                        ('endpoint', models.CharField(max_length=32)),
                        ('requested_model', models.CharField(blank=True, max_length=200)),
                        ('lane', models.CharField(blank=True, db_index=True, max_length=63)),
                        ('replica', models.PositiveSmallIntegerField(blank=True, null=True)),
                        ('route_reason', models.CharField(blank=True, choices=[('router', 'Router'), ('default', 'Default'), ('key_default', 'Key Default'), ('explicit', 'Explicit'), ('fallback', 'Fallback'), ('context', 'Context')], max_length=16)),
                        ('route_score', models.FloatField(blank=True, null=True)),
                        ('route_label', models.CharField(blank=True, max_length=64)),
                        ('route_prototype', models.CharField(blank=True, db_default='', help_text="The best-matching prototype's text (cut).", max_length=200)),
                        ('router_version', models.PositiveIntegerField(blank=True, null=True)),
                        ('shadow_version', models.PositiveIntegerField(blank=True, null=True)),
                        ('shadow_lane', models.CharField(blank=True, db_default='', max_length=63)),
                        ('shadow_label', models.CharField(blank=True, db_default='', max_length=64)),
                        ('shadow_score', models.FloatField(blank=True, null=True)),
                        ('stream', models.BooleanField(default=False)),
                        ('status', models.PositiveSmallIntegerField()),
                        ('error_code', models.CharField(blank=True, max_length=64)),
                        ('prompt_tokens', models.PositiveIntegerField(blank=True, null=True)),
                        ('completion_tokens', models.PositiveIntegerField(blank=True, null=True)),
                        ('usage_source', models.CharField(blank=True, db_default='', default='', max_length=8)),
                        ('ttft_ms', models.FloatField(blank=True, null=True)),
                        ('latency_ms', models.FloatField()),
                        ('upstream_ms', models.FloatField(blank=True, null=True)),
                        ('prompt_text', models.TextField(blank=True, default='')),
                        ('key', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to='gateway.apikey')),
                    ],
                    options={
                        'db_table': 'routing_requestlog',
                        'ordering': ['-id'],
                        'indexes': [models.Index(fields=['key', '-id'], name='requestlog_key_recent'), models.Index(fields=['lane', 'status', '-id'], name='requestlog_lane_status_recent')],
                    },
                ),
            ],
            database_operations=[],
        ),
    ]
