"""AIWorkspace 2021-02-04 actions: ListWorkspaces, GetWorkspace, CreateDataset, ListDatasets,
GetDataset, DeleteDataset, CreateCodeSource, ListCodeSources, GetCodeSource, DeleteCodeSource.

Thin views over datasets.services. A caller sees the workspaces it is a member of and their
datasets and code sources (PRIVATE ones only as their owner or a workspace owner or admin); any
other id answers EntityNotExist, exactly like one that does not exist.
"""

from __future__ import annotations

from django.core.exceptions import PermissionDenied

from apikit import params
from apikit.errors import forbidden, invalid, invalid_fields, not_found
from apikit.pagination import page_of, paginate
from apikit.schema import PAGING, sdk_action
from apikit.views import SdkView
from datasets import services
from datasets.models import Accessibility, CodeSource, Dataset
from quotas.models import Membership, Role

DATASET_FIELDS = {
    "workspace_id": "WorkspaceId", "name": "Name", "uri": "Uri", "data_source_type": "DataSourceType",
    "property": "Property", "options": "Options", "description": "Description", "accessibility": "Accessibility",
    "data_type": "DataType",
}
CODE_SOURCE_FIELDS = {
    "workspace_id": "WorkspaceId", "display_name": "DisplayName", "code_repo": "CodeRepo",
    "code_branch": "CodeBranch", "code_commit": "CodeCommit", "mount_path": "MountPath",
    "description": "Description", "accessibility": "Accessibility",
}
# What CreateDataset honours besides DATASET_FIELDS; any other field given is refused, not dropped.
DATASET_IGNORABLE = {"SourceType": ("USER",), "Provider": (), "ProviderType": (), "Edition": ("BASIC",),
                     "SourceId": (), "UserId": ()}
DATASET_SORT = {"GmtCreateTime": "created_at", "GmtModifiedTime": "modified_at", "Name": "name"}
CODE_SORT = {"GmtCreateTime": "created_at", "GmtModifyTime": "modified_at", "DisplayName": "display_name"}


def _call(fn, *args, names: dict[str, str]):
    """Run a service function; its refusals become the SDK's 404 / 403 / 400."""
    try:
        return fn(*args)
    except services.NotFound as exc:
        raise not_found(exc.kind, exc.ident) from None
    except PermissionDenied as exc:
        raise forbidden(str(exc)) from None
    except services.Refused as exc:
        raise invalid_fields({names.get(k, k): v for k, v in exc.errors.items()}) from None


def _refuse_unsupported(body: dict, known: set[str], ignorable: dict[str, tuple]) -> None:
    for key, value in sorted(body.items()):
        if key in known or not params.given(value):
            continue
        if key in ignorable and (not ignorable[key] or value in ignorable[key]):
            continue  # descriptive only: who provided the data does not change how it is mounted
        allowed = f" (only {', '.join(ignorable[key])})" if ignorable.get(key) else ""
        raise invalid(key, f"is not supported{allowed}; a dataset takes {', '.join(sorted(known))}")


def _string(body: dict, name: str, default: str = "") -> str:
    value = body.get(name)
    if not params.given(value):
        return default
    if not isinstance(value, (str, int)) or isinstance(value, bool):
        raise invalid(name, f"must be a string, got {value!r}")
    return str(value).strip()


# --- workspaces ------------------------------------------------------------------------------------

def _workspace_shape(workspace, admins: list[str]) -> dict:
    return {
        "WorkspaceId": str(workspace.pk), "WorkspaceName": workspace.name, "DisplayName": workspace.name,
        "Description": workspace.description, "Status": "ENABLED", "EnvTypes": ["prod"],
        "AdminNames": admins, "Creator": admins[0] if admins else None,
        "GmtCreateTime": params.fmt_time(workspace.created_at), "GmtModifiedTime": params.fmt_time(workspace.created_at),
        "IsDefault": getattr(workspace, "is_default", False),
    }


def _admins(workspace_ids) -> dict[int, list[str]]:
    out: dict[int, list[str]] = {}
    for wid, name in Membership.objects.filter(workspace_id__in=workspace_ids, role__in=(Role.OWNER, Role.ADMIN)) \
            .order_by("workspace_id", "role", "user__username").values_list("workspace_id", "user__username"):
        out.setdefault(wid, []).append(name)
    return out


class WorkspacesView(SdkView):
    """GET /api/v1/workspaces (ListWorkspaces)."""

    @sdk_action("ListWorkspaces", "The workspaces the caller is a member of",
                query=(*PAGING, "WorkspaceName", "WorkspaceIds", "Status", "Verbose", "Option", "Fields"))
    def get(self, request):
        q = request.query_params
        workspaces = services.member_workspaces(request.user).order_by("pk")
        if name := params.text(q, "WorkspaceName"):
            workspaces = workspaces.filter(name__icontains=name)
        if ids := params.listed(q, "WorkspaceIds"):
            workspaces = workspaces.filter(pk__in=[params.ident(i) for i in ids])
        if (status := params.text(q, "Status")) and status.upper() != "ENABLED":
            workspaces = workspaces.none()
        rows, total = paginate(workspaces, page_of(q, default_size=20, max_size=100))
        defaults = set(Membership.objects.filter(user=request.user, is_default=True).values_list("workspace_id", flat=True))
        admins = _admins([w.pk for w in rows])
        for w in rows:
            w.is_default = w.pk in defaults
        return self.reply(request, {"Workspaces": [_workspace_shape(w, admins.get(w.pk, [])) for w in rows],
                                    "TotalCount": total})


class WorkspaceView(SdkView):
    """GET /api/v1/workspaces/{WorkspaceId} (GetWorkspace)."""

    @sdk_action("GetWorkspace", "One workspace the caller is a member of", query=("Verbose",))
    def get(self, request, workspace_id):
        workspace = services.member_workspaces(request.user).filter(
            pk=params.ident(workspace_id)).first()
        if workspace is None:
            raise not_found("Workspace", workspace_id)
        workspace.is_default = Membership.objects.filter(user=request.user, workspace=workspace, is_default=True).exists()
        admins = _admins([workspace.pk]).get(workspace.pk, [])
        owner = Membership.objects.filter(workspace=workspace, role=Role.OWNER).select_related("user").first()
        body = _workspace_shape(workspace, admins)
        body["Owner"] = {"UserId": str(owner.user_id), "UserName": owner.user.username,
                         "DisplayName": owner.user.username} if owner else None
        return self.reply(request, body)


# --- datasets --------------------------------------------------------------------------------------

def dataset_shape(d: Dataset) -> dict:
    return {
        "DatasetId": d.dataset_id, "Name": d.name, "WorkspaceId": str(d.workspace_id), "Description": d.description,
        "Uri": d.uri, "DataSourceType": d.data_source_type, "Property": d.property, "DataType": d.data_type,
        "Accessibility": d.accessibility, "Options": d.options or f'{{"mountPath": "{d.mount_path}"}}',
        "SourceType": "USER", "OwnerId": str(d.owner_id), "UserId": str(d.owner_id),
        "GmtCreateTime": params.fmt_time(d.created_at), "GmtModifiedTime": params.fmt_time(d.modified_at),
        "Labels": [], "MountAccess": "RO",
    }


class DatasetsView(SdkView):
    """POST /api/v1/datasets (CreateDataset), GET /api/v1/datasets (ListDatasets)."""

    @sdk_action("CreateDataset", "Register a dataset: a host path (file:///...) or an NFS export (nfs://...)",
                body=True)
    def post(self, request):
        body = self.body(request)
        _refuse_unsupported(body, set(DATASET_FIELDS.values()), DATASET_IGNORABLE)
        req = services.DatasetRequest(
            workspace_id=_string(body, "WorkspaceId") or None, name=_string(body, "Name"), uri=_string(body, "Uri"),
            data_source_type=_string(body, "DataSourceType") or None,
            property=_string(body, "Property", "DIRECTORY"), options=_string(body, "Options"),
            description=_string(body, "Description"), accessibility=_string(body, "Accessibility", Accessibility.PRIVATE),
            data_type=_string(body, "DataType", "COMMON"),
        )
        dataset = _call(services.create_dataset, request.user, req, names=DATASET_FIELDS)
        return self.reply(request, {"DatasetId": dataset.dataset_id})

    @sdk_action("ListDatasets", "Datasets the caller sees", query=(
        *PAGING, "WorkspaceId", "Name", "DataSourceTypes", "Properties", "DatasetIds", "Accessibility"))
    def get(self, request):
        q = request.query_params
        rows = services.visible_datasets(request.user)
        if (workspace := params.text(q, "WorkspaceId")) is not None:
            rows = rows.filter(workspace_id=params.ident(workspace))
        if name := params.text(q, "Name"):
            rows = rows.filter(name__icontains=name)
        for key, column in (("DataSourceTypes", "data_source_type"), ("Properties", "property"),
                            ("DatasetIds", "dataset_id")):
            if values := params.listed(q, key):
                rows = rows.filter(**{f"{column}__in": values})
        if access := params.choice(q, "Accessibility", Accessibility.values):
            rows = rows.filter(accessibility=access)
        rows = _sorted(rows, q, DATASET_SORT)
        page, total = paginate(rows, page_of(q, default_size=20, max_size=100))
        return self.reply(request, {"Datasets": [dataset_shape(d) for d in page], "TotalCount": total})


def _sorted(rows, q, columns: dict[str, str]):
    column = columns[params.choice(q, "SortBy", columns, default="GmtCreateTime")]
    prefix = "-" if params.order(q) == "desc" else ""
    return rows.order_by(f"{prefix}{column}", f"{prefix}pk")


class DatasetView(SdkView):
    """GET (GetDataset), DELETE (DeleteDataset) /api/v1/datasets/{DatasetId}."""

    @sdk_action("GetDataset", "One dataset")
    def get(self, request, dataset_id):
        dataset = _call(services.dataset_for_user, request.user, dataset_id, names={})
        return self.reply(request, dataset_shape(dataset))

    @sdk_action("DeleteDataset", "Delete a dataset; jobs submitted with it keep it")
    def delete(self, request, dataset_id):
        dataset = _call(services.dataset_for_user, request.user, dataset_id, names={})
        _call(services.delete_dataset, request.user, dataset, names={})
        return self.reply(request, {})


# --- code sources ----------------------------------------------------------------------------------

def code_source_shape(c: CodeSource) -> dict:
    # CodeRepoAccessToken is never stored, so never shown back.
    return {
        "CodeSourceId": c.code_source_id, "DisplayName": c.display_name, "Description": c.description,
        "WorkspaceId": str(c.workspace_id), "CodeRepo": c.code_repo, "CodeBranch": c.code_branch or None,
        "CodeCommit": c.code_commit or None, "MountPath": c.mount_path, "Accessibility": c.accessibility,
        "UserId": str(c.owner_id), "GmtCreateTime": params.fmt_time(c.created_at),
        "GmtModifyTime": params.fmt_time(c.modified_at),
    }


class CodeSourcesView(SdkView):
    """POST /api/v1/codesources (CreateCodeSource), GET /api/v1/codesources (ListCodeSources)."""

    @sdk_action("CreateCodeSource", "Register a git repository at a branch or commit", body=True)
    def post(self, request):
        body = self.body(request)
        for key in ("CodeRepoUserName", "CodeRepoAccessToken"):
            if params.given(body.get(key)):
                raise invalid(key, "is not supported: the node agents clone without credentials, so the "
                                   "repository must be readable by them as it is")
        if params.given(body.get("CloneType")) and body["CloneType"] not in (0, "0"):
            raise invalid("CloneType", f"is not supported: a code source is cloned in full, got {body['CloneType']!r}")
        req = services.CodeSourceRequest(
            workspace_id=_string(body, "WorkspaceId") or None, display_name=_string(body, "DisplayName"),
            code_repo=_string(body, "CodeRepo"), code_branch=_string(body, "CodeBranch"),
            code_commit=_string(body, "CodeCommit"), mount_path=_string(body, "MountPath"),
            description=_string(body, "Description"),
            accessibility=_string(body, "Accessibility", Accessibility.PRIVATE),
        )
        code = _call(services.create_code_source, request.user, req, names=CODE_SOURCE_FIELDS)
        return self.reply(request, {"CodeSourceId": code.code_source_id})

    @sdk_action("ListCodeSources", "Code sources the caller sees", query=(*PAGING, "WorkspaceId", "DisplayName"))
    def get(self, request):
        q = request.query_params
        rows = services.visible_code_sources(request.user)
        if (workspace := params.text(q, "WorkspaceId")) is not None:
            rows = rows.filter(workspace_id=params.ident(workspace))
        if name := params.text(q, "DisplayName"):
            rows = rows.filter(display_name__icontains=name)
        page, total = paginate(_sorted(rows, q, CODE_SORT), page_of(q, default_size=20, max_size=100))
        return self.reply(request, {"CodeSources": [code_source_shape(c) for c in page], "TotalCount": total})


class CodeSourceView(SdkView):
    """GET (GetCodeSource), DELETE (DeleteCodeSource) /api/v1/codesources/{CodeSourceId}."""

    @sdk_action("GetCodeSource", "One code source")
    def get(self, request, code_source_id):
        code = _call(services.code_source_for_user, request.user, code_source_id, names={})
        return self.reply(request, code_source_shape(code))

    @sdk_action("DeleteCodeSource", "Delete a code source; jobs submitted with it keep it")
    def delete(self, request, code_source_id):
        code = _call(services.code_source_for_user, request.user, code_source_id, names={})
        _call(services.delete_code_source, request.user, code, names={})
        return self.reply(request, {"CodeSourceId": code_source_id})
