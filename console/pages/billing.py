"""Billing: the current workspace's daily bills of a range of days, with the payType tag, savings,
totals, the breakdown by user and by quota, and the CSV of the same bills."""

import csv
from datetime import timezone as dt_timezone
from decimal import Decimal
from urllib.parse import urlencode

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.db.models import Sum
from django.http import HttpResponse
from django.utils import timezone

from console.forms import BillingRangeForm
from console.pages.base import current_workspace, job_queryset, page
from spot.models import DailyBill
from spot.spend import spend_by

PAGE_SIZE = 100
# A cell a spreadsheet would read as a formula (OWASP's CSV injection list): a job's name is the
# user's own text, and opening the export must not run it.
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
CSV_HEADER = ["day", "job_id", "job_name", "instance_type", "tag", "minutes", "amount", "pay_as_you_go_amount", "savings"]


def workspace_bills(request, form: BillingRangeForm):
    """The bills of the current workspace's jobs the user may see, on the form's days (none when it is invalid)."""
    workspace = current_workspace(request)
    if workspace is None or not form.is_valid():
        return workspace, DailyBill.objects.none()
    jobs = job_queryset(request.user).filter(workspace=workspace).values("pk")
    bills = (DailyBill.objects.filter(job__in=jobs, day__gte=form.cleaned_data["from"], day__lte=form.cleaned_data["to"])
             .select_related("job", "spec").order_by("-day", "job__job_id", "spec__instance_type"))
    return workspace, bills


def range_form(request) -> BillingRangeForm:
    return BillingRangeForm(request.GET, today=timezone.now().astimezone(dt_timezone.utc).date())


def totals(bills) -> dict:
    sums = bills.aggregate(amount=Sum("amount"), on_demand=Sum("on_demand_amount"), minutes=Sum("minutes"))
    amount, on_demand = sums["amount"] or Decimal("0"), sums["on_demand"] or Decimal("0")
    return {"amount": amount, "on_demand": on_demand, "savings": on_demand - amount, "minutes": sums["minutes"] or 0}


@login_required
def billing(request):
    form = range_form(request)
    workspace, bills = workspace_bills(request, form)
    paged = Paginator(bills, PAGE_SIZE).get_page(request.GET.get("page"))
    by_type = bills.order_by().values("pay_type").annotate(amount=Sum("amount"), on_demand=Sum("on_demand_amount"))
    context = {
        "form": form, "page_obj": paged, "totals": totals(bills), "by_type": list(by_type), "workspace": workspace,
        "by_user": spend_by(bills, "job__user__username"), "by_quota": spend_by(bills, "job__quota__name"),
        "range_query": urlencode({k: form.cleaned_data[k] for k in ("from", "to")}) if form.is_valid() else "",
        "billing_minutes": max(1, settings.OPENDLC_BILLING_INTERVAL_S // 60),
    }
    return page(request, "console/billing/list.html", context, nav="billing", status=200 if form.is_valid() else 400)


@login_required
def billing_csv(request):
    form = range_form(request)
    if not form.is_valid():
        problems = "; ".join(f"{name}: {' '.join(errors)}" for name, errors in form.errors.items())
        return HttpResponse(problems, status=400, content_type="text/plain; charset=utf-8")
    workspace, bills = workspace_bills(request, form)
    name = workspace.name if workspace else "none"
    response = HttpResponse(content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="opendlc-bills-{name}.csv"'
    writer = csv.writer(response)
    writer.writerow(CSV_HEADER)
    for bill in bills.iterator():
        writer.writerow([
            bill.day.isoformat(), bill.job.job_id, as_text(bill.job.display_name), as_text(bill.spec.instance_type),
            f"acs:pai:dlc:payType={bill.pay_type}", bill.minutes, bill.amount, bill.on_demand_amount, bill.savings,
        ])
    return response


def as_text(value: str) -> str:
    """The value, read by a spreadsheet as text: a leading quote keeps a formula from running."""
    return "'" + value if value.startswith(FORMULA_START) else value
