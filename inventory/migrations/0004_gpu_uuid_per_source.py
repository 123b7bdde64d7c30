"""GPU uuids unique across clusters: synthetic Kubernetes uuids gain their source's name.

`k8s-<node>-gpu-0` becomes `k8s-<source>:<node>-gpu-0` (agents.k8s_resources.gpu_uuid), so two
clusters with a node of the same name no longer share (and fight over) one set of GPU rows. Rows
are renamed in place: their ids, and so their leases, samples and meter rows, are kept. The column
widens to 255 characters for the source name.
"""

from django.db import migrations, models


def qualify(apps, schema_editor):
    Gpu = apps.get_model("inventory", "Gpu")
    rows = (Gpu.objects.filter(host__source__kind="kubernetes", uuid__startswith="k8s-")
            .exclude(uuid__contains=":").values_list("pk", "uuid", "host__source__name"))
    renamed = [Gpu(pk=pk, uuid=f"k8s-{source}:{uuid[4:]}") for pk, uuid, source in rows]
    Gpu.objects.bulk_update(renamed, ["uuid"], batch_size=1000)


def unqualify(apps, schema_editor):
    Gpu = apps.get_model("inventory", "Gpu")
    rows = Gpu.objects.filter(host__source__kind="kubernetes", uuid__contains=":").values_list("pk", "uuid")
    Gpu.objects.bulk_update([Gpu(pk=pk, uuid="k8s-" + uuid.split(":", 1)[1]) for pk, uuid in rows],
                            ["uuid"], batch_size=1000)


class Migration(migrations.Migration):
    dependencies = [("inventory", "0003_time_slicing")]

    operations = [
        migrations.AlterField(model_name="gpu", name="uuid", field=models.CharField(max_length=255, unique=True)),
        migrations.RunPython(qualify, unqualify),
    ]
