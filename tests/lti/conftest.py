"""The emulated LMS (tests/lti/platform.py) on loopback, and the tool's registration of it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.lti.platform import Platform, PlatformServer
from tests.settings import free_port


@pytest.fixture
def platform() -> Iterator[Platform]:
    server = PlatformServer(Platform(), free_port())
    try:
        yield server.start()
    finally:
        server.stop()


def register(platform: Platform) -> Any:
    """The registration an administrator makes from the LMS's values (docs/lti.md), with an active
    deployment and the tool's first key (``manage.py rotate_keys``)."""
    from lti_tool.models import Key, LtiDeployment, LtiRegistration

    if not Key.objects.active().exists():
        Key.objects.generate()
    registration = LtiRegistration.objects.create(
        name="Emulated LMS",
        issuer=platform.issuer,
        client_id=platform.client_id,
        auth_url=platform.auth_url,
        token_url=platform.token_url,
        keyset_url=platform.jwks_url,
    )
    LtiDeployment.objects.create(registration=registration, deployment_id=platform.deployment_id, is_active=True)
    return registration
