"""Forms of the classroom pages: every error is attached to the field it is about."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django import forms
from django.contrib.auth.forms import UserCreationForm
from django.contrib.auth.models import User
from django.contrib.auth.password_validation import validate_password
from django.utils import timezone
from django.utils.functional import lazy
from django.utils.translation import gettext_lazy as _
from django.utils.translation import pgettext_lazy

from labapp.classes import services
from labapp.labs.catalog import LABS
from labapp.models import Assignment, Classroom

DATETIME_FORMAT = "%Y-%m-%dT%H:%M"


def join_code_clean(value: Any) -> tuple[str, Classroom]:
    """The join code and its class, or the service's reason (wrong, closed, expired) as a field error."""
    code = str(value)
    try:
        return code, services.classroom_by_code(code)
    except services.JoinCodeError as exc:
        raise forms.ValidationError(str(exc), code="join_code") from None


class SignUpForm(UserCreationForm):  # type: ignore[type-arg]
    field_order = ["join_code", "username", "email", "password1", "password2"]
    join_code = forms.CharField(
        label=_("가입 코드"), max_length=40, help_text=_("강사가 알려 준 수업 코드 (대소문자 구분 없음)")
    )

    class Meta(UserCreationForm.Meta):
        model = User
        fields = ("join_code", "username", "email")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["email"].required = False
        self.fields["email"].help_text = _("선택 사항입니다. 비밀번호는 이메일이 아니라 강사가 다시 정해 줍니다.")
        self.classroom: Classroom | None = None

    def clean_join_code(self) -> str:
        code, self.classroom = join_code_clean(self.cleaned_data["join_code"])
        return code


class JoinForm(forms.Form):
    join_code = forms.CharField(label=_("가입 코드"), max_length=40)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.classroom: Classroom | None = None

    def clean_join_code(self) -> str:
        code, self.classroom = join_code_clean(self.cleaned_data["join_code"])
        return code


class ClassroomForm(forms.Form):
    name = forms.CharField(label=_("수업 이름"), max_length=200)

    def clean_name(self) -> str:
        name = str(self.cleaned_data["name"]).strip()
        if not name:
            raise forms.ValidationError(_("수업 이름을 적어 주세요."))
        return name


class JoinCodeForm(forms.Form):
    ACTIONS = (("regenerate", _("새 코드 만들기")), ("open", _("가입 받기")), ("close", _("가입 막기")))

    action = forms.ChoiceField(choices=ACTIONS)
    expires_in_days = forms.IntegerField(
        label=_("유효 기간 (일, 비우면 무기한)"), required=False, min_value=1, max_value=365
    )

    def expires_at(self) -> Any:
        days = self.cleaned_data.get("expires_in_days")
        return timezone.now() + timedelta(days=days) if days else None


class TemporaryPasswordForm(forms.Form):
    password = forms.CharField(
        label=_("임시 비밀번호 (비우면 만들어 줍니다)"),
        required=False,
        strip=False,
        widget=forms.TextInput(attrs={"autocomplete": "off"}),
    )

    def __init__(self, *args: Any, learner: User, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.learner = learner

    def clean_password(self) -> str:
        password = str(self.cleaned_data.get("password") or "")
        if password:
            validate_password(password, self.learner)
        return password


class RosterUploadForm(forms.Form):
    roster = forms.FileField(
        label=_("명단 CSV"),
        help_text=_('첫 줄: username,email[,role][,password] — "role"은 "learner" 또는 "instructor"'),
    )


def zone_text() -> str:
    """The time zone a typed date and time is read in, by its name and its offset from UTC now."""
    offset = timezone.localtime().strftime("%z")  # "+0900"
    where = {"zone": timezone.get_current_timezone_name(), "offset": f"{offset[:3]}:{offset[3:]}"}
    return str(_("시간대 %(zone)s (UTC%(offset)s) 기준")) % where


def default_dates() -> dict[str, datetime]:
    """A new assignment's dates: open from now (to the minute), due a week later at 23:59, local time."""
    opens = timezone.localtime().replace(second=0, microsecond=0)
    return {"opens_at": opens, "due_at": (opens + timedelta(days=7)).replace(hour=23, minute=59)}


def _datetime_field(label: Any) -> forms.DateTimeField:
    return forms.DateTimeField(
        label=label,
        help_text=lazy(zone_text, str)(),
        input_formats=[DATETIME_FORMAT, "%Y-%m-%d %H:%M", "%Y-%m-%dT%H:%M:%S"],
        widget=forms.DateTimeInput(attrs={"type": "datetime-local"}, format=DATETIME_FORMAT),
    )


class AssignmentForm(forms.Form):
    lab = forms.TypedChoiceField(
        label=pgettext_lazy("one lab", "실습"),
        coerce=int,
        choices=lambda: [(number, lab.title) for number, lab in LABS.items()],  # the labs registered now
        error_messages={"invalid_choice": _("그런 실습이 없습니다 (받은 값: %(value)s).")},
    )
    opens_at = _datetime_field(_("열리는 시각"))
    due_at = _datetime_field(_("마감 시각"))
    late_rule = forms.ChoiceField(
        label=_("마감 뒤 제출"),
        choices=Assignment.LateRule.choices,
        initial=Assignment.LateRule.ACCEPT,
    )

    def __init__(self, *args: Any, classroom: Classroom, instance: Assignment | None = None, **kwargs: Any) -> None:
        if instance is not None and "initial" not in kwargs:
            kwargs["initial"] = {
                "lab": instance.lab,
                "opens_at": timezone.localtime(instance.opens_at),
                "due_at": timezone.localtime(instance.due_at),
                "late_rule": instance.late_rule,
            }
        kwargs.setdefault("initial", default_dates())
        super().__init__(*args, **kwargs)
        self.classroom, self.instance = classroom, instance

    def clean_lab(self) -> int:
        lab = int(self.cleaned_data["lab"])
        taken = Assignment.objects.filter(classroom=self.classroom, lab=lab)
        if self.instance is not None:
            taken = taken.exclude(pk=self.instance.pk)
        if taken.exists():
            message = _("이 수업에는 이미 실습 %(lab)d 과제가 있습니다. 그 과제를 고치세요.")
            raise forms.ValidationError(message % {"lab": lab})
        return lab

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        opens_at, due_at = cleaned.get("opens_at"), cleaned.get("due_at")
        if opens_at is not None and due_at is not None and due_at <= opens_at:
            self.add_error("due_at", _("마감 시각은 열리는 시각보다 뒤여야 합니다."))
        return cleaned
