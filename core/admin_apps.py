"""Django admin's app config with the portal's site (core/admin_site.py): who may open
/admin/ is the role's decision, like every page. Listed in INSTALLED_APPS in place of
django.contrib.admin."""

from django.contrib.admin.apps import AdminConfig


class PortalAdminConfig(AdminConfig):
    default_site = "core.admin_site.PortalAdminSite"
