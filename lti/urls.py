from django.urls import path
from lti_tool.views import jwks

from lti import views

app_name = "lti"

urlpatterns = [
    path("jwks/", jwks, name="jwks"),  # the tool's public keys (django-lti's, rotated by `manage.py rotate_keys`)
    path("init/<uuid:registration_uuid>/", views.LoginInitView.as_view(), name="init"),
    path("launch/", views.LaunchView.as_view(), name="launch"),
    path("deep-link/", views.deep_link_choose, name="deep_link_choose"),
    path("classes/<int:classroom_id>/roster/", views.roster_sync, name="roster_sync"),
    path("classes/<int:classroom_id>/grades/", views.grades_resend, name="grades_resend"),
]
