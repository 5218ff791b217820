from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class LtiConfig(AppConfig):
    name = "lti"
    verbose_name = _("LMS 연동 (LTI 1.3)")
    default_auto_field = "django.db.models.BigAutoField"
