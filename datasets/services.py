"""Datasets and code sources as users change them, who may see which, and what a job may mount.

The API (api/workspaces.py) and job submission (jobs/services.py) call these functions; a refusal is
`Refused` naming each field with what is allowed, and an entity the caller may not see is
`NotFound`, exactly as one that does not exist, so ids of other teams cannot be probed.
"""

from __future__ import annotations

import json
import re
import secrets
import string
from dataclasses import dataclass

from django.core.exceptions import PermissionDenied
from django.db.models import Q

from agent import mounts
from datasets.models import Accessibility, CodeSource, Dataset, DataSourceType, Property
from quotas.models import Membership, Role, Workspace

WRITER_ROLES = (Role.OWNER, Role.ADMIN, Role.MEMBER)
MANAGER_ROLES = (Role.OWNER, Role.ADMIN)
NAME = re.compile(r"^[A-Za-z0-9\u4e00-\u9fff][A-Za-z0-9_\-\u4e00-\u9fff]{0,126}$")
NAME_RULE = "1 to 127 letters, digits, _ or -, starting with a letter or digit"
DEFAULT_DATASET_MOUNT = "/mnt/data/"
CODE_MOUNT_ROOT = "/root/code/"
# A branch as git allows it, less what would read as an option or leave the repository.
BRANCH = re.compile(r"^(?!-)(?!.*\.\.)(?!.*//)[A-Za-z0-9._/\-]{1,255}(?<![./])$")
COMMIT = re.compile(r"^[0-9a-fA-F]{7,64}$")
REPO = re.compile(r"^((https?|git|ssh|file)://\S+|[\w.\-]+@[\w.\-]+:\S+)$")
ID_ALPHABET = string.ascii_lowercase + string.digits
SOURCE_TYPES = {"file": DataSourceType.FILE, "nfs": DataSourceType.NAS}


class Refused(Exception):
    def __init__(self, errors: dict[str, str]):
        super().__init__("; ".join(f"{k}: {v}" for k, v in errors.items()))
        self.errors = errors


class NotFound(Exception):
    def __init__(self, kind: str, ident: str):
        super().__init__(f"{kind} {ident!r} does not exist")
        self.kind, self.ident = kind, ident


# ---- who sees what ----------------------------------------------------------------------------


def member_workspaces(user):
    """The workspaces the user is a member of (any role)."""
    return Workspace.objects.filter(memberships__user=user)


def _visible(model, user):
    """PUBLIC entities of the user's workspaces, and PRIVATE ones the user owns or whose workspace
    the user owns or administers."""
    managed = Membership.objects.filter(user=user, role__in=MANAGER_ROLES).values("workspace_id")
    member = Membership.objects.filter(user=user).values("workspace_id")
    return model.objects.filter(workspace_id__in=member).filter(
        Q(accessibility=Accessibility.PUBLIC) | Q(owner=user) | Q(workspace_id__in=managed))


def visible_datasets(user):
    return _visible(Dataset, user)


def visible_code_sources(user):
    return _visible(CodeSource, user)


def dataset_for_user(user, dataset_id: str) -> Dataset:
    found = visible_datasets(user).select_related("workspace", "owner").filter(dataset_id=dataset_id).first()
    if found is None:
        raise NotFound("Dataset", dataset_id)
    return found


def code_source_for_user(user, code_source_id: str) -> CodeSource:
    found = visible_code_sources(user).select_related("workspace", "owner").filter(
        code_source_id=code_source_id).first()
    if found is None:
        raise NotFound("CodeSource", code_source_id)
    return found


def _writable_workspace(user, workspace_id, errors: dict) -> Workspace | None:
    if workspace_id in (None, ""):
        errors["workspace_id"] = "is required: the id of a workspace you are a member of"
        return None
    wid = str(workspace_id)
    # Compared as text: an id is its ASCII digits, not int()'s reading of any digits and spaces.
    membership = next((m for m in Membership.objects.filter(user=user).select_related("workspace")
                       if str(m.workspace_id) == wid), None)
    if membership is None:
        errors["workspace_id"] = f"workspace {workspace_id!r} does not exist or you are not a member of it"
        return None
    if membership.role not in WRITER_ROLES:
        errors["workspace_id"] = (f"you are a {membership.role} of workspace {membership.workspace.name}; "
                                  "creating needs owner, admin or member")
        return None
    return membership.workspace


def _may_delete(user, entity) -> bool:
    return entity.owner_id == user.pk or Membership.objects.filter(
        user=user, workspace_id=entity.workspace_id, role__in=MANAGER_ROLES).exists()


def new_id(prefix: str) -> str:
    return prefix + "".join(secrets.choice(ID_ALPHABET) for _ in range(16))


# ---- datasets -----------------------------------------------------------------------------------


@dataclass
class DatasetRequest:
    workspace_id: int | str | None
    name: str
    uri: str
    data_source_type: str | None = None  # None: from the URI's scheme
    property: str = Property.DIRECTORY
    options: str = ""  # JSON, e.g. {"mountPath": "/mnt/data/"}
    description: str = ""
    accessibility: str = Accessibility.PRIVATE
    data_type: str = "COMMON"


def create_dataset(user, req: DatasetRequest) -> Dataset:
    errors: dict[str, str] = {}
    workspace = _writable_workspace(user, req.workspace_id, errors)
    _check_name(errors, "name", req.name)
    source_type = _check_uri(errors, req)
    if req.property not in Property.values:
        errors["property"] = f"must be one of {', '.join(Property.values)}, got {req.property!r}"
    if req.accessibility not in Accessibility.values:
        errors["accessibility"] = f"must be one of {', '.join(Accessibility.values)}, got {req.accessibility!r}"
    mount_path = _dataset_mount_path(errors, req.options)
    if workspace and not errors.get("name") and Dataset.objects.filter(workspace=workspace, name=req.name).exists():
        errors["name"] = f"workspace {workspace.name} already has a dataset named {req.name!r}"
    if errors:
        raise Refused(errors)
    return Dataset.objects.create(
        dataset_id=new_id("d-"), workspace=workspace, owner=user, name=req.name, uri=req.uri.strip(),
        data_source_type=source_type, property=req.property, options=req.options or "", mount_path=mount_path,
        description=req.description or "", accessibility=req.accessibility, data_type=req.data_type or "COMMON",
    )


def _check_name(errors: dict, field: str, value) -> None:
    if not isinstance(value, str) or not NAME.fullmatch(value):
        errors[field] = f"must be {NAME_RULE}, got {value!r}"


def _check_uri(errors: dict, req: DatasetRequest) -> str | None:
    try:
        parsed = mounts.parse_uri(req.uri)
    except ValueError as exc:
        errors["uri"] = str(exc)
        return None
    derived = SOURCE_TYPES[parsed.scheme]
    if req.data_source_type not in (None, derived):
        errors["data_source_type"] = (f"{req.uri} is a {derived} dataset ({DataSourceType(derived).label}); "
                                      f"supported: FILE (file:///path), NAS (nfs://server/export/path), "
                                      f"got {req.data_source_type!r}")
    return derived


def _dataset_mount_path(errors: dict, options: str) -> str:
    """The mount path a job uses when it names none: Options' `mountPath`, else /mnt/data/."""
    if not options:
        return DEFAULT_DATASET_MOUNT
    try:
        parsed = json.loads(options)
    except ValueError:
        parsed = None
    if not isinstance(parsed, dict):
        errors["options"] = f'must be a JSON object such as {{"mountPath": "/mnt/data/"}}, got {options!r}'
        return ""
    path = parsed.get("mountPath", DEFAULT_DATASET_MOUNT)
    if problem := mounts.path_problem(path):
        errors["options"] = f"mountPath {problem}"
    return path


def delete_dataset(user, dataset: Dataset) -> None:
    """Jobs keep what they were submitted with: a job that mounts the dataset still runs."""
    if not _may_delete(user, dataset):
        raise PermissionDenied(f"only its owner or an owner or admin of workspace {dataset.workspace.name} "
                               f"may delete dataset {dataset.dataset_id}")
    dataset.delete()


# ---- code sources -------------------------------------------------------------------------------


@dataclass
class CodeSourceRequest:
    workspace_id: int | str | None
    display_name: str
    code_repo: str
    code_branch: str = ""
    code_commit: str = ""
    mount_path: str = ""  # "": /root/code/<display name>
    description: str = ""
    accessibility: str = Accessibility.PRIVATE


def create_code_source(user, req: CodeSourceRequest) -> CodeSource:
    errors: dict[str, str] = {}
    workspace = _writable_workspace(user, req.workspace_id, errors)
    _check_name(errors, "display_name", req.display_name)
    if not isinstance(req.code_repo, str) or not REPO.fullmatch(req.code_repo.strip()):
        errors["code_repo"] = ("must be a git repository URL: https://, http://, git://, ssh://, file:// or "
                               f"user@host:path, got {req.code_repo!r}")
    check_revision(errors, "code_branch", "code_commit", req.code_branch, req.code_commit)
    mount_path = req.mount_path or (CODE_MOUNT_ROOT + req.display_name if not errors.get("display_name") else "")
    if mount_path and (problem := mounts.path_problem(mount_path)):
        errors["mount_path"] = problem
    if req.accessibility not in Accessibility.values:
        errors["accessibility"] = f"must be one of {', '.join(Accessibility.values)}, got {req.accessibility!r}"
    if errors:
        raise Refused(errors)
    return CodeSource.objects.create(
        code_source_id=new_id("code-"), workspace=workspace, owner=user, display_name=req.display_name,
        description=req.description or "", code_repo=req.code_repo.strip(), code_branch=req.code_branch or "",
        code_commit=req.code_commit or "", mount_path=mount_path, accessibility=req.accessibility,
    )


def check_revision(errors: dict, branch_field: str, commit_field: str, branch, commit) -> None:
    if branch and (not isinstance(branch, str) or not BRANCH.fullmatch(branch)):
        errors[branch_field] = f"must be a git branch name such as main or release/1.0, got {branch!r}"
    if commit and (not isinstance(commit, str) or not COMMIT.fullmatch(commit)):
        errors[commit_field] = f"must be a commit id: 7 to 64 hexadecimal digits, got {commit!r}"


def delete_code_source(user, code_source: CodeSource) -> None:
    if not _may_delete(user, code_source):
        raise PermissionDenied(f"only its owner or an owner or admin of workspace {code_source.workspace.name} "
                               f"may delete code source {code_source.code_source_id}")
    code_source.delete()


# ---- what a job mounts ----------------------------------------------------------------------------


@dataclass
class JobDataSource:
    """One of CreateJob's DataSources: a registered dataset, where the pods see it."""

    data_source_id: str
    mount_path: str = ""  # "": the dataset's own mount path
    uri: str = ""  # "": the dataset's URI; else the URI of a directory inside it
    options: str = ""


@dataclass
class JobCodeSource:
    """CreateJob's CodeSource: a registered code source, its branch or commit and mount path
    overriding the registered ones."""

    code_source_id: str
    branch: str = ""
    commit: str = ""
    mount_path: str = ""


def resolve_job_sources(user, workspace_pk: int | None, data_sources: list[JobDataSource],
                        code_source: JobCodeSource | None, errors: dict[str, str]) -> tuple[list[dict], dict | None]:
    """What a job of the workspace mounts, as stored on the job and sent to the agents:
    ([{data_source_id, uri, mount_path}], {code_source_id, repo, branch, commit, mount_path} or None).

    Each problem goes into `errors` (`data_sources[1].mount_path`: ...). A dataset or code source
    must be one the user sees in the job's workspace; mount paths are absolute, and no two sources
    share one or lie one inside the other (a link inside a mounted dataset would write into it)."""
    visible = {d.dataset_id: d for d in visible_datasets(user).filter(
        workspace_id=workspace_pk, dataset_id__in=[str(s.data_source_id) for s in data_sources])}
    mounted, paths = [], []
    for i, source in enumerate(data_sources):
        if (found := _job_dataset(source, visible, f"data_sources[{i}]", errors)) is not None:
            mounted.append(found)
            paths.append((f"data_sources[{i}].mount_path", found["mount_path"]))
    code = _job_code(user, workspace_pk, code_source, errors) if code_source is not None else None
    if code is not None:
        paths.append(("code_source.mount_path", code["mount_path"]))
    if clash := mounts.overlapping([p for _, p in paths]):
        field = next(name for name, p in reversed(paths) if p in clash)
        first, later = clash
        errors.setdefault(field, f"{later} is also another source's mount path" if first == later else
                          f"{later} and {first} lie one inside the other; each source needs a mount path of its own")
    return mounted, code


def _job_dataset(source: JobDataSource, visible: dict, at: str, errors: dict) -> dict | None:
    dataset = visible.get(str(source.data_source_id)) if source.data_source_id else None
    if not source.data_source_id:
        errors[f"{at}.data_source_id"] = "is required: the DatasetId of a dataset registered with CreateDataset"
        return None
    if dataset is None:
        errors[f"{at}.data_source_id"] = f"dataset {source.data_source_id!r} does not exist in the job's workspace"
        return None
    if source.options and source.options.strip() not in ("{}",):
        errors[f"{at}.options"] = "mount options are not supported: datasets are mounted as they are"
        return None
    uri = _job_uri(dataset, source.uri, f"{at}.uri", errors)
    path = source.mount_path or dataset.mount_path
    if problem := mounts.path_problem(path):
        errors[f"{at}.mount_path"] = problem
        return None
    if uri is None:
        return None
    return {"data_source_id": dataset.dataset_id, "uri": uri, "mount_path": mounts.normalize(path)}


def _job_uri(dataset: Dataset, uri: str, field: str, errors: dict) -> str | None:
    """The dataset's URI, or a directory inside it that the job names."""
    if not uri or uri == dataset.uri:
        return dataset.uri
    try:
        inner, outer = mounts.parse_uri(uri), mounts.parse_uri(dataset.uri)
    except ValueError as exc:
        errors[field] = str(exc)
        return None
    if (inner.scheme, inner.server) != (outer.scheme, outer.server) or not (
            inner.path == outer.path or inner.path.startswith(outer.path.rstrip("/") + "/")):
        errors[field] = f"must be the dataset's URI {dataset.uri} or a path inside it, got {uri!r}"
        return None
    return uri


def _job_code(user, workspace_pk, source: JobCodeSource, errors: dict) -> dict | None:
    if not source.code_source_id:
        errors["code_source.code_source_id"] = "is required: the CodeSourceId of a code source registered with CreateCodeSource"
        return None
    found = visible_code_sources(user).filter(workspace_id=workspace_pk, code_source_id=str(source.code_source_id)).first()
    if found is None:
        errors["code_source.code_source_id"] = f"code source {source.code_source_id!r} does not exist in the job's workspace"
        return None
    check_revision(errors, "code_source.branch", "code_source.commit", source.branch, source.commit)
    path = source.mount_path or found.mount_path
    if problem := mounts.path_problem(path):
        errors["code_source.mount_path"] = problem
    if any(k.startswith("code_source.") for k in errors):
        return None
    # A job that names a branch and no commit takes that branch's head, not the registered commit.
    commit = source.commit or ("" if source.branch else found.code_commit)
    return {"code_source_id": found.code_source_id, "repo": found.code_repo,
            "branch": source.branch or found.code_branch, "commit": commit, "mount_path": mounts.normalize(path)}
