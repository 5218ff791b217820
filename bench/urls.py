from django.urls import path, re_path

from bench import views

urlpatterns = [
    path("bench/", views.bench_list, name="bench_list"),
    path("bench/compare/", views.bench_compare, name="bench_compare"),
    path("bench/<int:job_id>/", views.bench_detail, name="bench_detail"),
    path("bench/<int:job_id>/cancel/", views.bench_cancel, name="bench_cancel"),
    re_path(r"^bench/(?P<job_id>[0-9]+)/export\.(?P<fmt>json|csv)$", views.bench_export, name="bench_export"),
]
