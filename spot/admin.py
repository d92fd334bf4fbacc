from django.contrib import admin

from spot.models import DailyBill, PriceHistory


@admin.register(PriceHistory)
class PriceHistoryAdmin(admin.ModelAdmin):
    list_display = ["spec", "at", "price", "stock_status", "utilization"]
    list_filter = ["spec", "stock_status"]
    date_hierarchy = "at"


@admin.register(DailyBill)
class DailyBillAdmin(admin.ModelAdmin):
    list_display = ["job", "spec", "day", "pay_type", "minutes", "amount", "on_demand_amount"]
    list_filter = ["pay_type", "day"]
