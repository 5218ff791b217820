from django.contrib import admin
from django.urls import include, path

from labapp import views, views_demo, views_labs

urlpatterns = [
    path("", views.home, name="home"),
    path("chapter/<slug:slug>/", views.chapter_section, name="chapter_section"),
    path("demo/", views_demo.demo, name="demo"),
    path("demo/sweep/", views_demo.demo_sweep, name="demo_sweep"),
    path("demo/sweep/<int:job_id>.json", views_demo.demo_sweep_state, name="demo_sweep_state"),
    path("labs/", views_labs.lab_list, name="lab_list"),
    path("labs/<int:number>/", views_labs.lab_page, name="lab_page"),
    path("labs/<int:number>/run/", views_labs.lab_run, name="lab_run"),
    path("labs/<int:number>/submit/", views_labs.lab_submit, name="lab_submit"),
    path("status/", views.status_page, name="status"),
    path("status.json", views.status_json, name="status_json"),
    path("status/banner/", views.status_banner, name="status_banner"),
    path("healthz", views.healthz, name="healthz"),
    path("", include("labapp.classes.urls")),  # sign-up, sign-in, classes (before Django's accounts/)
    path("accounts/", include("django.contrib.auth.urls")),
    path("", include("rag.urls")),
    path("", include("bench.urls")),
    path("i18n/", include("django.conf.urls.i18n")),
    path("admin/", admin.site.urls),
]
