"""Why a launch was refused, in words for the person who opened it (never the library's exception)."""

from __future__ import annotations

from django.utils.translation import gettext as _


def reason(detail: str) -> str:
    """The reader's words for PyLTI1p3's reason ``detail`` (which goes to the log, not the page)."""
    text = detail.lower()
    if "expired" in text:
        return _("LMS에서 보낸 실행 정보의 유효 시간이 지났습니다. LMS로 돌아가 실습을 다시 여세요.")
    if "registration not found" in text or "client id not registered" in text or "registration details" in text:
        return _(
            "이 실행 정보는 이 실습실에 등록된 LMS 도구 앞으로 온 것이 아닙니다(받는 쪽이 다름). "
            "관리자에게 LMS 등록(발급자와 클라이언트 ID)을 확인해 달라고 하세요."
        )
    if "signature" in text or "public key" in text or "decode" in text or "jwt" in text:
        return _("실행 정보의 서명을 확인할 수 없습니다. LMS로 돌아가 실습을 다시 여세요.")
    if "state" in text or "nonce" in text:
        return _("로그인 절차가 끝나지 않았거나 이미 쓰인 실행입니다. LMS로 돌아가 실습을 다시 여세요.")
    return _("LMS에서 온 실행 요청을 확인할 수 없습니다. LMS로 돌아가 실습을 다시 여세요.")


def inactive() -> str:
    return _("이 LMS 배포는 아직 실습실에서 허용되지 않았습니다. 관리자가 관리 화면에서 배포를 켜야 합니다.")
