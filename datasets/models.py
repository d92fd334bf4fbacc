"""A workspace's registered data and code: datasets (a URI the nodes can reach) and code sources
(a git repository at a branch or commit), which jobs mount by id (DataSources, CodeSource)."""

from django.conf import settings
from django.db import models

from quotas.models import Workspace


class Accessibility(models.TextChoices):
    # PAI's two: PRIVATE is seen by its owner and the workspace's owners and admins only.
    PUBLIC = "PUBLIC"
    PRIVATE = "PRIVATE"


class DataSourceType(models.TextChoices):
    FILE = "FILE", "A host path every node has (file:///...)"
    NAS = "NAS", "An NFS export (nfs://server/export/path)"


class Property(models.TextChoices):
    DIRECTORY = "DIRECTORY"
    FILE = "FILE"


class Dataset(models.Model):
    dataset_id = models.CharField(max_length=64, unique=True)
    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="datasets")
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="datasets")
    name = models.CharField(max_length=127)
    description = models.CharField(max_length=1024, blank=True)
    uri = models.CharField(max_length=1024)
    data_source_type = models.CharField(max_length=16, choices=DataSourceType.choices)
    property = models.CharField(max_length=16, choices=Property.choices, default=Property.DIRECTORY)
    data_type = models.CharField(max_length=16, default="COMMON")
    accessibility = models.CharField(max_length=16, choices=Accessibility.choices, default=Accessibility.PRIVATE)
    # The Options string as given; a job that names no MountPath mounts at its `mountPath`.
    options = models.TextField(blank=True)
    mount_path = models.CharField(max_length=1024)
    created_at = models.DateTimeField(auto_now_add=True)
    modified_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [models.UniqueConstraint(fields=["workspace", "name"], name="unique_dataset_name")]

    def __str__(self) -> str:
        return f"{self.name} ({self.dataset_id})"


class CodeSource(models.Model):
    code_source_id = models.CharField(max_length=64, unique=True)
    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="code_sources")
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="code_sources")
    display_name = models.CharField(max_length=127)
    description = models.CharField(max_length=1024, blank=True)
    code_repo = models.CharField(max_length=1024)
    code_branch = models.CharField(max_length=255, blank=True)
    code_commit = models.CharField(max_length=64, blank=True)
    mount_path = models.CharField(max_length=1024)
    accessibility = models.CharField(max_length=16, choices=Accessibility.choices, default=Accessibility.PRIVATE)
    created_at = models.DateTimeField(auto_now_add=True)
    modified_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.display_name} ({self.code_source_id})"
