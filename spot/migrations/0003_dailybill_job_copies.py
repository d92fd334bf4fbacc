"""DailyBill's copies of its job's workspace, user and accessibility, added empty and filled from the
jobs. 0004 then makes them required: on PostgreSQL a table cannot be altered in the transaction that
updated its foreign keys (pending trigger events), so the schema change is a migration of its own."""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models
from django.db.models import OuterRef, Subquery


def copy_from_jobs(apps, schema_editor):
    Job = apps.get_model("jobs", "Job")
    DailyBill = apps.get_model("spot", "DailyBill")
    job = Job.objects.filter(pk=OuterRef("job_id"))
    DailyBill.objects.update(**{field: Subquery(job.values(field)[:1])
                                for field in ("workspace_id", "user_id", "accessibility")})


class Migration(migrations.Migration):

    dependencies = [
        ("jobs", "0018_name_search_trigram"),
        ("quotas", "0006_quota_backfill_weight"),
        ("spot", "0002_pricehistory_engine_state"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AddField(
            model_name="dailybill",
            name="workspace",
            field=models.ForeignKey(db_index=False, null=True, on_delete=django.db.models.deletion.CASCADE,
                                    related_name="+", to="quotas.workspace"),
        ),
        migrations.AddField(
            model_name="dailybill",
            name="user",
            field=models.ForeignKey(db_index=False, null=True, on_delete=django.db.models.deletion.CASCADE,
                                    related_name="+", to=settings.AUTH_USER_MODEL),
        ),
        migrations.AddField(
            model_name="dailybill",
            name="accessibility",
            field=models.CharField(choices=[("PUBLIC", "Public"), ("PRIVATE", "Private")], max_length=16,
                                   null=True),
        ),
        migrations.RunPython(copy_from_jobs, migrations.RunPython.noop),
    ]
