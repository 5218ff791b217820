"""The one place that talks to an LMS's services (its token endpoint, AGS, NRPS): PyLTI1p3's
service connector over a requests session with a time limit, so a slow LMS never holds a page."""

from __future__ import annotations

from typing import Any

import requests
from lti_tool.models import LtiRegistration
from pylti1p3.service_connector import ServiceConnector

TIMEOUT_S = 10.0


class _TimedSession(requests.Session):
    """A requests session whose every request gives up after ``TIMEOUT_S`` (PyLTI1p3 sets none)."""

    def request(self, *args: Any, **kwargs: Any) -> Any:
        kwargs.setdefault("timeout", TIMEOUT_S)
        return super().request(*args, **kwargs)


def connector(registration: LtiRegistration) -> ServiceConnector:
    return ServiceConnector(registration.to_registration(), requests_session=_TimedSession())
