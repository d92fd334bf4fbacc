from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

from console import metrics, views
from console.pages import analytics, billing, create, jobs, keys, market, notifications, quotas, workspace

console_patterns = [
    path("", views.home, name="home"),
    path("workspace/", workspace.switch, name="workspace"),
    path("jobs/", jobs.job_list, name="jobs"),
    path("jobs/create/", create.job_create, name="job-create"),
    path("jobs/<str:job_id>/", jobs.job_detail, name="job-detail"),
    path("jobs/<str:job_id>/stop/", jobs.job_stop, name="job-stop"),
    path("jobs/<str:job_id>/logs/", jobs.job_logs, name="job-logs"),
    path("quotas/", quotas.quota_list, name="quotas"),
    path("quotas/new/", quotas.quota_edit, name="quota-create"),
    path("quotas/<str:quota_id>/edit/", quotas.quota_edit, name="quota-edit"),
    path("nodes/", quotas.node_list, name="nodes"),
    path("nodes/<str:name>/operate", quotas.node_operate, name="node-operate"),
    path("spot/", market.market, name="market"),
    path("spot/<str:instance_type>/history/", market.price_chart, name="price-chart"),
    path("spot/<str:instance_type>/advice/", market.bid_advice, name="bid-advice"),
    path("usage/", analytics.usage, name="usage"),
    path("usage/<str:table>.csv", analytics.usage_csv, name="usage-csv"),
    path("billing/", billing.billing, name="billing"),
    path("billing/export.csv", billing.billing_csv, name="billing-csv"),
    path("access-keys/", keys.key_list, name="access-keys"),
    path("access-keys/create/", keys.key_create, name="access-key-create"),
    path("access-keys/created/", keys.key_created, name="access-key-created"),
    path("access-keys/<str:key_id>/disable/", keys.key_disable, name="access-key-disable"),
    path("access-keys/<str:key_id>/delete/", keys.key_delete, name="access-key-delete"),
    path("notifications/", notifications.notifications, name="notifications"),
    path("notifications/<str:pk>/delete/", notifications.notification_delete, name="notification-delete"),
    path("notifications/<str:pk>/test/", notifications.notification_test, name="notification-test"),
]

urlpatterns = [
    path("", include((console_patterns, "console"))),
    path("login/", auth_views.LoginView.as_view(template_name="console/login.html"), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("healthz", views.healthz, name="healthz"),
    path("favicon.ico", views.favicon),
    path("metrics", metrics.metrics, name="metrics"),
    path("admin/", admin.site.urls),
    path("", include("api.urls")),
]
