"""Spot bid validation for CreateJob: the pure rules of spot.bids, named by the request's fields.

jobs' create_job (API and form alike) calls ``spot_job_errors`` for a job whose source is
Preemptible Resources, or ``spot_role_errors`` role by role. Both take the request's own shapes:
a role is the CreateJob ``JobSpecs[i]`` mapping (``EcsSpec``, ``SpotSpec`` with ``SpotStrategy``,
``SpotDiscountLimit`` | ``SpotPriceLimit``, and OpenDLC's ``SpotSpec.SpotDuration``, the
protection period in hours) and ``user_vpc`` is the request's ``UserVpc`` mapping.

Field mapping (pure spot.bids name -> request name, ``{p}`` = ``JobSpecs[i]`` by default):

    SpotSpec                      -> {p}.SpotSpec                 (neither or both limits given)
    SpotSpec.SpotStrategy         -> {p}.SpotSpec.SpotStrategy
    SpotSpec.SpotDiscountLimit    -> {p}.SpotSpec.SpotDiscountLimit
    SpotSpec.SpotPriceLimit       -> {p}.SpotSpec.SpotPriceLimit  (also: Lingjun takes discounts only)
    SpotDuration                  -> {p}.SpotSpec.SpotDuration
    UserVpc.VpcId / SwitchId / SecurityGroupId -> unchanged (top level of CreateJob), once per job
    (platform)                    -> {p}.EcsSpec                  (unknown type, wrong resource type,
                                                                   no public pool)

Each error is ``{"field", "message"}``; the message says what is allowed. Prices are per
node-minute: a SpotPriceLimit must lie in 10 %-100 % of the type's on-demand price per minute.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from quotas.models import Node, ResourceSpec
from spot.bids import FieldError, validate_spot_bid


def spot_job_errors(job_specs: Sequence[Mapping[str, Any]], *, resource_type: str,
                    user_vpc: Mapping[str, Any] | None = None) -> list[FieldError]:
    """Every spot problem of a CreateJob's roles; UserVpc errors are reported once."""
    errors: list[FieldError] = []
    for index, role in enumerate(job_specs):
        for error in spot_role_errors(role, index=index, resource_type=resource_type, user_vpc=user_vpc):
            if error not in errors:
                errors.append(error)
    return errors


def spot_role_errors(role: Mapping[str, Any], *, index: int, resource_type: str,
                     user_vpc: Mapping[str, Any] | None = None, prefix: str | None = None) -> list[FieldError]:
    """The spot problems of one role ``JobSpecs[index]`` (``prefix`` overrides the field prefix)."""
    prefix = prefix if prefix is not None else f"JobSpecs[{index}]"
    spec, spec_errors = _instance_type(role.get("EcsSpec"), resource_type, prefix)
    if spec is None:
        return spec_errors
    spot_spec = role.get("SpotSpec") or {}
    errors = validate_spot_bid(
        spot_spec, resource_type=resource_type, on_demand_price=spec.on_demand_price_per_minute,
        user_vpc=user_vpc, spot_duration=spot_spec.get("SpotDuration"),
    )
    return spec_errors + [_renamed(e, prefix) for e in errors]


def _renamed(error: FieldError, prefix: str) -> FieldError:
    name = error["field"]
    if name.startswith("UserVpc"):
        return error
    if name == "SpotDuration":
        name = "SpotSpec.SpotDuration"
    return {"field": f"{prefix}.{name}", "message": error["message"]}


def _instance_type(instance_type: Any, resource_type: str, prefix: str) -> tuple[ResourceSpec | None, list[FieldError]]:
    """The role's ResourceSpec if spot can run on it, else the EcsSpec error."""
    field = f"{prefix}.EcsSpec"
    offered = sorted(set(
        Node.objects.filter(quota__isnull=True, spec__resource_type=resource_type)
        .values_list("spec__instance_type", flat=True)
    ))
    allowed = ", ".join(offered) or "none"
    spec = ResourceSpec.objects.filter(instance_type=instance_type).first() if isinstance(instance_type, str) else None
    if spec is None:
        return None, [{"field": field, "message": f"unknown instance type {instance_type!r}; preemptible {resource_type} types: {allowed}"}]
    if spec.resource_type != resource_type:
        return None, [{"field": field, "message": f"{spec.instance_type} is a {spec.resource_type} type, not {resource_type}; preemptible {resource_type} types: {allowed}"}]
    if spec.instance_type not in offered:
        return spec, [{"field": field, "message": f"{spec.instance_type} has no preemptible resources (no public pool); preemptible {resource_type} types: {allowed}"}]
    return spec, []
