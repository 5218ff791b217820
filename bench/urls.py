from django.urls import path, re_path

from bench import views, views_engines

urlpatterns = [
    path("bench/", views.bench_list, name="bench_list"),
    path("engines/", views_engines.engine_list, name="engine_list"),
    path("engines/pick/", views_engines.engine_pick, name="engine_pick"),
    path("engines/add/", views_engines.engine_add, name="engine_add"),
    path("engines/<int:engine_id>/delete/", views_engines.engine_delete, name="engine_delete"),
    path("bench/compare/", views.bench_compare, name="bench_compare"),
    path("bench/import/", views.bench_import, name="bench_import"),
    path("bench/<int:job_id>/", views.bench_detail, name="bench_detail"),
    path("bench/<int:job_id>/cancel/", views.bench_cancel, name="bench_cancel"),
    path("bench/<int:job_id>/delete/", views.bench_delete, name="bench_delete"),
    re_path(
        r"^bench/(?P<job_id>[0-9]+)/export\.(?P<fmt>json|csv|engine\.csv)$", views.bench_export, name="bench_export"
    ),
]
