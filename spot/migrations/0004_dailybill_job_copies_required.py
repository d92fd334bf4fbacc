import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("spot", "0003_dailybill_job_copies"),
    ]

    operations = [
        migrations.AlterField(
            model_name="dailybill",
            name="workspace",
            field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name="+",
                                    to="quotas.workspace"),
        ),
        migrations.AlterField(
            model_name="dailybill",
            name="user",
            field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name="+",
                                    to=settings.AUTH_USER_MODEL),
        ),
        migrations.AlterField(
            model_name="dailybill",
            name="accessibility",
            field=models.CharField(choices=[("PUBLIC", "Public"), ("PRIVATE", "Private")], max_length=16),
        ),
        migrations.AddIndex(
            model_name="dailybill",
            index=models.Index(fields=["day"], include=("workspace", "user", "accessibility", "pay_type", "minutes",
                                                        "amount", "on_demand_amount"), name="bill_day_covering"),
        ),
    ]
