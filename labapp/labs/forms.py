"""The lab page's run form: the learner's prediction of the lab's key number (optional)."""

from __future__ import annotations

import math
from typing import Any

from django import forms
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from bench.kinds.labs import Target


class RunForm(forms.Form):
    """The prediction is optional; when given it is a finite number within the target's range."""

    prediction = forms.CharField(label=gettext_lazy("내 예측"), required=False, max_length=40)

    def __init__(self, *args: Any, target: Target, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.target = target

    def clean_prediction(self) -> float | None:
        text = (self.cleaned_data.get("prediction") or "").strip().replace(",", "")
        if not text:
            return None
        try:
            value = float(text)
        except ValueError:
            raise forms.ValidationError(
                _("예측은 숫자로 적어 주세요 (예: 4.5). 받은 값: %(value)s") % {"value": text[:40]}
            ) from None
        if not math.isfinite(value) or not self.target.low <= value <= self.target.high:
            raise forms.ValidationError(
                _("예측은 %(low)s부터 %(high)s 사이의 수여야 합니다 (단위: %(unit)s).")
                % {"low": f"{self.target.low:g}", "high": f"{self.target.high:g}", "unit": self.target.unit}
            )
        return value
