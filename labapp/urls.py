from django.contrib import admin
from django.urls import include, path

from labapp.chapter import views as chapter_views
from labapp.labs import demo as demo_views
from labapp.labs import views as lab_views
from labapp.status import views as status_views

urlpatterns = [
    path("", chapter_views.home, name="home"),
    path("chapter/", chapter_views.chapter_index, name="chapter_index"),
    path("chapter/<slug:slug>/", chapter_views.chapter_section, name="chapter_section"),
    path("favicon.ico", chapter_views.favicon, name="favicon"),
    path("demo/", demo_views.demo, name="demo"),
    path("demo/sweep/", demo_views.demo_sweep, name="demo_sweep"),
    path("demo/sweep/<int:job_id>.json", demo_views.demo_sweep_state, name="demo_sweep_state"),
    path("labs/", lab_views.lab_list, name="lab_list"),
    path("labs/<int:number>/", lab_views.lab_page, name="lab_page"),
    path("labs/<int:number>/run/", lab_views.lab_run, name="lab_run"),
    path("labs/<int:number>/submit/", lab_views.lab_submit, name="lab_submit"),
    path("status/", status_views.status_page, name="status"),
    path("status.json", status_views.status_json, name="status_json"),
    path("status/banner/", status_views.status_banner, name="status_banner"),
    path("healthz", status_views.healthz, name="healthz"),
    path("", include("labapp.classes.urls")),  # sign-up, sign-in, sign-out, password change, classes
    path("", include("rag.urls")),
    path("", include("bench.urls")),
    path("lti/", include("lti.urls")),
    path("i18n/", include("django.conf.urls.i18n")),
    path("admin/", admin.site.urls),
]
