from django.contrib.auth import views as auth_views
from django.urls import path

from labapp.classes import views, views_accounts

urlpatterns = [
    path("accounts/signup/", views_accounts.signup, name="signup"),
    # Django's accounts pages, but only these four: passwords are reset by instructors, never
    # by e-mail (a reset form would tell which addresses have an account).
    path("accounts/login/", views_accounts.SignInView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("accounts/password_change/", views_accounts.PasswordChangeView.as_view(), name="password_change"),
    path(
        "accounts/password_change/done/",
        auth_views.PasswordChangeDoneView.as_view(),
        name="password_change_done",
    ),
    path("classes/", views.class_list, name="class_list"),
    path("classes/new/", views.class_create, name="class_create"),
    path("classes/join/", views.class_join, name="class_join"),
    path("classes/<int:classroom_id>/", views.class_detail, name="class_detail"),
    path("classes/<int:classroom_id>/join-code/", views.class_join_code, name="class_join_code"),
    path("classes/<int:classroom_id>/roster/", views.roster_upload, name="roster_upload"),
    path("classes/<int:classroom_id>/roster/confirm/", views.roster_confirm, name="roster_confirm"),
    path("classes/<int:classroom_id>/assignments/new/", views.assignment_create, name="assignment_create"),
    path("classes/<int:classroom_id>/assignments/<int:assignment_id>/", views.assignment_edit, name="assignment_edit"),
    path(
        "classes/<int:classroom_id>/assignments/<int:assignment_id>/delete/",
        views.assignment_delete,
        name="assignment_delete",
    ),
    path("classes/<int:classroom_id>/results/", views.class_results, name="class_results"),
    path("classes/<int:classroom_id>/results.csv", views.class_results_csv, name="class_results_csv"),
    path("classes/<int:classroom_id>/charts.json", views.class_charts_json, name="class_charts_json"),
    path("classes/<int:classroom_id>/learners/<int:user_id>/", views.learner_detail, name="learner_detail"),
    path(
        "classes/<int:classroom_id>/learners/<int:user_id>/password/",
        views.learner_password,
        name="learner_password",
    ),
    path(
        "classes/<int:classroom_id>/learners/<int:user_id>/jobs/<int:job_id>/",
        views.learner_job,
        name="learner_job",
    ),
]
