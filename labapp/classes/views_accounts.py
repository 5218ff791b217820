"""Class-mode accounts: sign-up with a join code; sign-in that sends a temporary password to be changed.

Sign-out and the password change's done page are Django's own views (labapp/classes/urls.py
names each route: there is no reset by e-mail).
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib import messages
from django.contrib.auth import login
from django.contrib.auth import views as auth_views
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.translation import gettext as _

from labapp.accounts import MUST_CHANGE_PASSWORD, must_change_password
from labapp.classes import services, throttle
from labapp.classes.forms import SignUpForm


def signup(request: HttpRequest) -> HttpResponse:
    if settings.LAB_MODE != "class":
        raise Http404("sign-up exists only on a class server")
    if request.method == "POST" and (wait_s := throttle.join_code_wait_s(request)):
        # Nothing is checked or created; what was typed comes back (passwords are never shown again).
        return _signup_refused(request, SignUpForm(initial=request.POST.dict()), throttle.join_code_refusal(wait_s))
    form = SignUpForm(request.POST or None)
    if request.method == "POST" and form.has_error("join_code", code="join_code"):
        throttle.join_code_failed(request)
    elif request.method == "POST" and form.is_valid():
        assert form.classroom is not None
        if refusal := throttle.signup_refusal(request, form.classroom):
            return _signup_refused(request, form, refusal)
        user = services.learner_signup(
            username=form.cleaned_data["username"],
            email=form.cleaned_data.get("email") or "",
            password=form.cleaned_data["password1"],
            classroom=form.classroom,
        )
        login(request, user, backend="django.contrib.auth.backends.ModelBackend")
        messages.success(request, _("%(name)s 수업에 들어왔습니다.") % {"name": form.classroom.name})
        return redirect("lab_list")
    return render(request, "registration/signup.html", {"form": form})


def _signup_refused(request: HttpRequest, form: SignUpForm, refusal: str) -> HttpResponse:
    messages.error(request, refusal)
    return render(request, "registration/signup.html", {"form": form}, status=429)


class SignInView(auth_views.LoginView):
    def form_valid(self, form: Any) -> HttpResponse:
        response = super().form_valid(form)
        if must_change_password(form.get_user()):
            self.request.session[MUST_CHANGE_PASSWORD] = True  # every page leads here until it is changed
            messages.info(self.request, _("임시 비밀번호로 로그인했습니다. 나만 아는 비밀번호로 바꿔 주세요."))
            return redirect("password_change")
        return response


class PasswordChangeView(auth_views.PasswordChangeView):
    def form_valid(self, form: Any) -> HttpResponse:
        response = super().form_valid(form)
        services.password_changed(user=form.user)
        self.request.session.pop(MUST_CHANGE_PASSWORD, None)
        return response

    def get_success_url(self) -> str:
        return reverse("password_change_done")
