"""The console's forms. The Create Job form checks shape only (types, allowed choices, what the
chosen Source needs); the rules of the domain (VPC for Lingjun spot, quota limits, ...) are
jobs.services.create_job's, and its field errors are put back next to the inputs by
`apply_service_errors`.
"""

import re
from datetime import timedelta
from decimal import Decimal

from django import forms
from django.forms import formset_factory

from datasets.models import CodeSource, Dataset
from datasets.services import visible_code_sources, visible_datasets
from jobs.models import Accessibility, FaultTolerancePolicy, JobType, OversoldType, RunType, Source
from jobs.services import DISPLAY_NAME_MAX, POD_RESOURCE_LIMITS
from market.engine import PRICE_PLACES
from market.units import from_hourly
from quotas.models import Node, Quota, ResourceSpec, ResourceType
from quotas.services import assignable_nodes, parent_choices, workspace_choices

DISCOUNTS = [(f"0.{n}", f"{n}0%") for n in range(1, 10)]
FRAMEWORKS = [
    (JobType.PYTORCH, "PyTorch"), (JobType.TENSORFLOW, "TensorFlow"), (JobType.MPI, "MPIJob"),
    (JobType.XGBOOST, "XGBoost"), (JobType.RAY, "Ray"), (JobType.SLURM, "Slurm"),
]
ROLES = ["Worker", "Master", "PS", "Chief", "Evaluator"]
ENV_LINE = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$")
TAG_LINE = re.compile(r"^([^=]+)=(.*)$")


def specs_for(resource_type: str, source: str):
    """Instance types a role may use: of the resource type; spot and public need a public pool."""
    specs = ResourceSpec.objects.filter(resource_type=resource_type)
    if source in (Source.SPOT, Source.PUBLIC):
        specs = specs.filter(nodes__quota__isnull=True).distinct()
    return specs.order_by("gpu", "instance_type")


def quotas_for(workspace, resource_type: str):
    """Quotas bound to the workspace and of the resource type."""
    if workspace is None:
        return Quota.objects.none()
    return Quota.objects.filter(workspaces=workspace, resource_type=resource_type).order_by("name")


class JobForm(forms.Form):
    # Basic Information
    display_name = forms.CharField(label="Job Name", max_length=DISPLAY_NAME_MAX)
    job_type = forms.ChoiceField(label="Framework", choices=FRAMEWORKS, initial=JobType.PYTORCH)
    image = forms.CharField(label="Image", max_length=512)
    user_command = forms.CharField(label="Startup Command", widget=forms.Textarea(attrs={"rows": 3}))
    envs = forms.CharField(
        label="Environment Variables", required=False, widget=forms.Textarea(attrs={"rows": 2}),
        help_text="One KEY=VALUE per line.",
    )
    hidden_envs = forms.CharField(
        label="Hidden Environment Variables", required=False, widget=forms.Textarea(attrs={"rows": 2}),
        help_text="One KEY=VALUE per line, for secrets: the pods get them, no page or API shows their values "
                  "again (a clone asks for them anew).",
    )
    description = forms.CharField(label="Description", required=False, max_length=1024,
                                  widget=forms.Textarea(attrs={"rows": 2}))
    accessibility = forms.ChoiceField(
        label="Accessibility", initial=Accessibility.PUBLIC, widget=forms.RadioSelect, required=False,
        choices=[(Accessibility.PUBLIC, "Workspace: every member sees it"),
                 (Accessibility.PRIVATE, "Private: only me and the workspace's owners and admins")],
    )
    tags = forms.CharField(label="Tags", required=False, widget=forms.Textarea(attrs={"rows": 2}),
                           help_text="One KEY=VALUE per line; ListJobs filters by them.")
    priority = forms.TypedChoiceField(
        label="Priority", choices=[(n, n) for n in range(1, 10)], coerce=int, initial=1,
        help_text="1 (lowest) to 9 (highest); orders jobs within a quota.",
    )
    max_running_time_minutes = forms.IntegerField(
        label="Maximum Running Time", required=False, min_value=1, max_value=60 * 24 * 30,
        help_text="Minutes; the job is stopped after this. Empty: no limit.",
    )
    # Resource Information
    resource_type = forms.ChoiceField(
        label="Resource Type", choices=ResourceType.choices, initial=ResourceType.ECS, widget=forms.RadioSelect
    )
    source = forms.ChoiceField(label="Source", choices=Source.choices, initial=Source.QUOTA, widget=forms.RadioSelect)
    quota = forms.ModelChoiceField(
        label="Resource Quota", queryset=Quota.objects.none(), required=False, to_field_name="quota_id",
        empty_label="Select a resource quota",
        error_messages={"invalid_choice": "Choose a resource quota bound to this workspace and of the chosen Resource Type."},
    )
    oversold_type = forms.ChoiceField(
        label="Idle Resources", choices=OversoldType.choices, initial=OversoldType.FORBIDDEN, widget=forms.RadioSelect,
        required=False,  # shown only for Source = Resource Quota; empty means Not accepted
    )
    # VPC
    vpc_id = forms.CharField(label="VPC", required=False, max_length=64)
    switch_id = forms.CharField(label="vSwitch", required=False, max_length=64)
    security_group_id = forms.CharField(label="Security Group", required=False, max_length=64)
    # Fault Tolerance and Diagnosis
    ft_enabled = forms.BooleanField(label="Automatic Fault Tolerance", required=False)
    ft_run_type = forms.ChoiceField(label="Run Type", choices=[
        (RunType.SYNCHRONOUS, "Synchronous Job"), (RunType.ASYNCHRONOUS, "Asynchronous Job")
    ], initial=RunType.SYNCHRONOUS)
    ft_max_restarts = forms.IntegerField(label="Maximum Job Restarts", min_value=0, max_value=100, initial=3)
    ft_hang_detection = forms.BooleanField(label="Hang Detection", required=False)
    ft_hang_interval_minutes = forms.IntegerField(
        label="Hang detection interval", min_value=1, max_value=24 * 60, initial=30,
        help_text="Minutes without log output or progress before the job counts as hung.",
    )
    ft_policy = forms.ChoiceField(
        label="Fault Tolerance Policy", choices=[(v, v) for v in FaultTolerancePolicy.values],
        initial=FaultTolerancePolicy.EXIT_CODE_AND_ERROR_MSG,
    )
    ft_other_config = forms.CharField(label="Other Configuration", required=False, max_length=1024)
    # Elastic Training (PAI's ElasticSpec): the role's Nodes are its MaxParallelism.
    elastic_enabled = forms.BooleanField(label="Elastic Training", required=False)
    elastic_min = forms.IntegerField(
        label="Minimum Workers (MinParallelism)", required=False, initial=1,
        help_text="The job starts once this many of its Nodes fit, grows to all of them while idle resources are "
                  "free, and when they are reclaimed shrinks back toward this instead of being preempted whole.",
    )
    elastic_in_place = forms.BooleanField(
        label="Resize in Place", required=False,
        help_text="For training loops that use easyckpt.ElasticGroup: the workers that stay re-form their group "
                  "instead of restarting, so a resize costs only the new workers' start-up.",
    )
    # Datasets and code (registered in the workspace; mounted where each says)
    datasets = forms.ModelMultipleChoiceField(
        label="Datasets", queryset=Dataset.objects.none(), required=False,
        to_field_name="dataset_id", widget=forms.CheckboxSelectMultiple,
        help_text="Each is mounted at its own mount path.",
    )
    code_source = forms.ModelChoiceField(
        label="Code Source", queryset=CodeSource.objects.none(), required=False, to_field_name="code_source_id", empty_label="None",
        help_text="Cloned at its branch or commit into its mount path before the command runs.",
    )

    def __init__(self, *args, workspace=None, user=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["quota"].queryset = quotas_for(workspace, self.chosen_resource_type)
        if user is not None and workspace is not None:
            self.fields["datasets"].queryset = visible_datasets(user).filter(workspace=workspace).order_by("name")
            self.fields["code_source"].queryset = visible_code_sources(user).filter(
                workspace=workspace).order_by("display_name")

    # The choices that shape the rest of the form, read before validation (they pick querysets).
    @property
    def chosen_resource_type(self) -> str:
        return _choice(self, "resource_type", ResourceType.values)

    @property
    def chosen_source(self) -> str:
        return _choice(self, "source", Source.values)

    @property
    def ft_on(self) -> bool:
        value = self["ft_enabled"].value()
        return value in (True, "on", "true", "1", "True")

    @property
    def elastic_on(self) -> bool:
        return self["elastic_enabled"].value() in (True, "on", "true", "1", "True")

    @property
    def lingjun_spot(self) -> bool:
        return self.chosen_resource_type == ResourceType.LINGJUN and self.chosen_source == Source.SPOT

    def clean_envs(self) -> dict:
        return _pairs(self.cleaned_data["envs"], ENV_LINE)

    def clean_hidden_envs(self) -> dict:
        envs = _pairs(self.cleaned_data["hidden_envs"], ENV_LINE)
        if empty := [k for k, v in envs.items() if not v]:
            # A clone offers hidden variables by name only: an empty value is one not entered again.
            raise forms.ValidationError(f"{', '.join(empty)}: enter the value (hidden values are not shown again).")
        return envs

    def clean_tags(self) -> dict:
        return {k.strip(): v.strip() for k, v in _pairs(self.cleaned_data["tags"], TAG_LINE).items()}

    def clean(self):
        data = super().clean()
        if data.get("source") == Source.QUOTA and not data.get("quota") and "quota" not in self.errors:
            self.add_error("quota", "Choose the resource quota the job runs on (Source is Resource Quota).")
        if data.get("source") != Source.QUOTA:
            data["quota"] = None
        data["oversold_type"] = data.get("oversold_type") or OversoldType.FORBIDDEN
        return data


def _pairs(text: str, line_format) -> dict:
    """KEY=VALUE lines as a dict; blank lines are skipped."""
    pairs = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        match = line_format.match(line.strip())
        if not match:
            raise forms.ValidationError(f"Line {number}: expected KEY=VALUE, got {line.strip()!r}.")
        pairs[match[1]] = match[2]
    return pairs


def _choice(form, name, allowed):
    value = form[name].value()
    return value if value in allowed else form.fields[name].initial


NODE_AMOUNTS = ("gpu", "cpu", "memory_gib")


def node_amount(label: str, low: int, high: int) -> forms.IntegerField:
    """One of a node's own resources (GPUs, vCPUs, Memory) on a Resource Quota, in whole units,
    within jobs.services.POD_RESOURCE_LIMITS."""
    allowed = f"{label} must be a whole number from {low} to {high}"
    return forms.IntegerField(
        label=label, required=False, min_value=low, max_value=high,
        widget=forms.NumberInput(attrs={"aria-label": f"{label} per node"}),
        error_messages={"invalid": f"{allowed}.", "min_value": f"{allowed}, got %(show_value)s.",
                        "max_value": f"{allowed}, got %(show_value)s."},
    )


BY_DISCOUNT, BY_PRICE_LIMIT = "discount", "price_limit"
# create_job's names for a role's bid -> BidForm's inputs, where their errors are shown.
BID_FIELDS = {"spot_strategy": "bid_discount", "spot_discount_limit": "bid_discount",
              "spot_price_limit": "bid_price_limit", "spot_duration_hours": "bid_discount"}


class BidForm(forms.Form):
    """A spot bid as the console takes it: a discount of the on-demand price (SpotDiscountLimit), or a
    price limit per node-hour (SpotPriceLimit, which the API keeps per node-minute: `price_limit`
    converts). Shape only; what a bid may be is market.bids.validate_spot_bid's (via create_job).
    The Job Resource rows bid with it, and so does the bid advisor."""

    bid_kind = forms.ChoiceField(
        label="Bid by", choices=[(BY_DISCOUNT, "Discount"), (BY_PRICE_LIMIT, "Price limit")], initial=BY_DISCOUNT,
        required=False, widget=forms.RadioSelect,
    )
    bid_discount = forms.TypedChoiceField(
        label="Bid Price (Discount)", choices=[("", "Select a discount"), *DISCOUNTS], coerce=Decimal, required=False, empty_value=None,
        error_messages={"invalid_choice": "Bid Price (Discount) must be one of 10%%, 20%%, ... 90%% of the on-demand price; %(value)s is not allowed."},
    )
    bid_price_limit = forms.DecimalField(
        label="Bid Price Limit (/h)", required=False, min_value=0, max_digits=16, decimal_places=6,
        widget=forms.NumberInput(attrs={"step": "0.0001", "placeholder": "per node-hour"}),
        error_messages={"invalid": "Bid Price Limit must be a price per node-hour, such as 12.5.",
                        "min_value": "Bid Price Limit must be a price per node-hour above 0.",
                        "max_digits": "Bid Price Limit must be a price per node-hour with at most 6 decimals.",
                        "max_decimal_places": "Bid Price Limit must be a price per node-hour with at most 6 decimals.",
                        "max_whole_digits": "Bid Price Limit must be a price per node-hour below 10,000,000,000."},
    )

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        kind = self.add_prefix("bid_kind")
        if self.is_bound and not self.data.get(kind):
            # A bid that names no kind is a discount, the form's first choice: show that radio
            # checked rather than neither (a link or an older page may send only bid_discount).
            self.data = self.data.copy()
            self.data[kind] = BY_DISCOUNT

    def clean(self):
        data = super().clean()
        data["bid_kind"] = data.get("bid_kind") or BY_DISCOUNT
        # Only the chosen kind counts: the other input may still hold an earlier value.
        data["bid_discount" if data["bid_kind"] == BY_PRICE_LIMIT else "bid_price_limit"] = None
        return data

    def require_bid(self) -> None:
        """A spot role must bid: an error on the chosen kind's input when it is empty."""
        data = self.cleaned_data
        if data.get("bid_kind") == BY_PRICE_LIMIT:
            if data.get("bid_price_limit") is None and "bid_price_limit" not in self.errors:
                self.add_error("bid_price_limit", "Enter a Bid Price Limit per node-hour for Preemptible Resources, "
                                                  "within the market price range shown.")
        elif data.get("bid_discount") is None and "bid_discount" not in self.errors:
            self.add_error("bid_discount", "Choose a Bid Price (Discount) between 10% and 90% for Preemptible Resources.")

    def spot_limits(self) -> dict:
        """After validation: create_job's spot_discount_limit / spot_price_limit (per node-minute)."""
        data = self.cleaned_data
        price = data.get("bid_price_limit")
        return {"spot_discount_limit": data.get("bid_discount"),
                "spot_price_limit": None if price is None else price_limit(price)}


def price_limit(per_hour: Decimal) -> Decimal:
    """A price per node-hour as the API's per node-minute SpotPriceLimit, rounded as prices are."""
    return from_hourly(per_hour, PRICE_PLACES)


class RoleForm(BidForm):
    """One row of the Job Resource table. On a Resource Quota the row gives a Resource Specification,
    or leaves it empty and gives each node's GPUs, vCPUs and Memory (PAI's ResourceConfig); the
    other sources need a specification and do not show the three amounts."""

    role = forms.ChoiceField(label="Role", choices=[(r, r) for r in ROLES], initial="Worker")
    pod_count = forms.IntegerField(label="Nodes", min_value=1, max_value=128, initial=1)
    spec = forms.ModelChoiceField(
        label="Resource Specification", queryset=ResourceSpec.objects.none(), to_field_name="instance_type",
        empty_label="Select a specification",
        error_messages={"invalid_choice": "Choose a Resource Specification of the chosen Resource Type and Source.",
                        "required": "Choose a Resource Specification for the role."},
    )
    gpu = node_amount("GPUs", *POD_RESOURCE_LIMITS["gpu"][:2])
    cpu = node_amount("vCPUs", *POD_RESOURCE_LIMITS["cpu"][:2])
    memory_gib = node_amount("Memory (GiB)", 1, POD_RESOURCE_LIMITS["memory_mib"][1] // 1024)  # whole GiB

    def __init__(self, *args, resource_type=ResourceType.ECS, source=Source.QUOTA, **kwargs):
        super().__init__(*args, **kwargs)
        self.source = source
        self.fields["spec"].queryset = specs_for(resource_type, source)
        if source == Source.QUOTA:
            self.fields["spec"].required = False  # or the node's own resources, checked in clean()
        else:
            for name in NODE_AMOUNTS:
                del self.fields[name]

    def clean(self):
        data = super().clean()
        if self.source == Source.SPOT:
            self.require_bid()
        else:
            data["bid_discount"] = data["bid_price_limit"] = None
        if self.source == Source.QUOTA:
            self._clean_node_amounts(data)
        return data

    def _clean_node_amounts(self, data) -> None:
        """A specification or the amounts, not both; with the amounts, vCPUs and Memory are needed
        and empty GPUs mean none. An amount that failed its own check still counts as given."""
        given = [n for n in NODE_AMOUNTS if data.get(n) is not None or n in self.errors]
        if not given:
            if data.get("spec") is None and "spec" not in self.errors:
                self.add_error("spec", "Choose a Resource Specification, or give the GPUs, vCPUs and Memory (GiB) "
                                       "of each node instead.")
            return
        if data.get("spec") is not None:
            self.add_error("spec", "Give a Resource Specification or GPUs / vCPUs / Memory (GiB), not both: "
                                   "empty the specification or the three amounts.")
            return
        for name in ("cpu", "memory_gib"):
            if name not in given:
                field = self.fields[name]
                self.add_error(name, f"{field.label} is required when the Resource Specification is empty: "
                                     f"a whole number from {field.min_value} to {field.max_value}.")
        if "gpu" not in self.errors:
            data["gpu"] = data.get("gpu") or 0


class BaseRoleFormSet(forms.BaseFormSet):
    def clean(self):
        if any(self.errors):
            return
        roles = [f.cleaned_data["role"] for f in self.forms if f.cleaned_data and not self._should_delete_form(f)]
        if not roles:
            raise forms.ValidationError("Add at least one role to Job Resource.")
        if len(roles) != len(set(roles)):
            raise forms.ValidationError("Each role appears once in Job Resource; set its Nodes instead.")


RoleFormSet = formset_factory(RoleForm, formset=BaseRoleFormSet, extra=0, can_delete=True, max_num=len(ROLES), validate_max=True)


class QuotaForm(forms.ModelForm):
    """The fields of a quota; quotas.services.create_quota / update_quota make the change (the form
    is never saved itself), and the choices are only what the user may pick."""

    nodes = forms.ModelMultipleChoiceField(
        label="Nodes", queryset=Node.objects.none(), required=False, widget=forms.CheckboxSelectMultiple,
        help_text="Free Ready nodes of the public pool, or of the parent quota for a sub-quota.",
    )

    class Meta:
        model = Quota
        fields = [
            "name", "description", "parent", "resource_type", "queue_strategy", "allow_priority_preemption",
            "min_runtime_before_preemption_s", "backfill", "weight", "workspaces",
        ]
        labels = {"min_runtime_before_preemption_s": "Minimum runtime before preemption (s)",
                  "backfill": "Backfill behind a reservation", "weight": "Fair-share weight"}
        widgets = {"workspaces": forms.CheckboxSelectMultiple}

    def __init__(self, *args, user, **kwargs):
        super().__init__(*args, **kwargs)
        quota = self.instance if self.instance.pk else None
        self.fields["parent"].queryset = parent_choices(user, quota)
        if not user.is_staff and not (quota and quota.parent_id is None):
            self.fields["parent"].required = True  # a root quota needs staff
            self.fields["parent"].error_messages["required"] = "Choose the parent quota: a root quota needs a staff user."
        self.fields["weight"].required = False
        self.fields["workspaces"].queryset = workspace_choices(user, quota)
        self.fields["nodes"].queryset = (
            assignable_nodes(quota, self._parent()).select_related("spec", "quota").order_by("spec__instance_type", "name")
        )
        if quota:
            self.fields["nodes"].initial = list(quota.nodes.values_list("pk", flat=True))

    def _parent(self):
        """The parent as asked, if it is one of the choices: it picks the pool of nodes offered."""
        raw = self["parent"].value()
        try:
            return self.fields["parent"].queryset.filter(pk=int(raw)).first() if raw else None
        except (TypeError, ValueError):
            return None


class UsageRangeForm(forms.Form):
    """The Usage page's range: whole UTC days `from` to `to`, both included (default: the last 7 days)."""

    MAX_DAYS = 366
    DEFAULT_DAYS = 7

    def __init__(self, data, today):
        data = {"from": (today - timedelta(days=self.DEFAULT_DAYS - 1)).isoformat(), "to": today.isoformat(),
                **{k: v for k, v in data.items() if k in ("from", "to") and v}}
        super().__init__(data)
        date_errors = {"invalid": "Enter a date as YYYY-MM-DD."}
        self.fields["from"] = forms.DateField(label="From", input_formats=["%Y-%m-%d"], error_messages=date_errors,
                                              widget=forms.DateInput(attrs={"type": "date"}))
        self.fields["to"] = forms.DateField(label="To", input_formats=["%Y-%m-%d"], error_messages=date_errors,
                                            widget=forms.DateInput(attrs={"type": "date"}))

    def clean(self):
        data = super().clean()
        first, last = data.get("from"), data.get("to")
        if first and last and last < first:
            self.add_error("to", f"To ({last}) must be on or after From ({first}).")
        elif first and last and (last - first).days + 1 > self.MAX_DAYS:
            days = (last - first).days + 1
            self.add_error("to", f"The range may span at most {self.MAX_DAYS} days; it spans {days}.")
        return data


class BillingRangeForm(UsageRangeForm):
    """Billing's range of bill days: as Usage's, but the last 30 days by default (bills are read by the month)."""

    DEFAULT_DAYS = 30
