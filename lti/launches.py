"""Launches as PyLTI1p3 checks and keeps them, on the ``lti`` cache (settings.CACHES: the stack's Redis,
shared by every web process) instead of django-lti's default per-process cache."""

from __future__ import annotations

from django.core.cache import caches
from django.http import HttpRequest
from lti_tool.models import LtiLaunch
from lti_tool.utils import DjangoToolConfig
from pylti1p3.contrib.django.launch_data_storage.cache import DjangoCacheDataStorage
from pylti1p3.contrib.django.message_launch import DjangoMessageLaunch

CACHE = "lti"
NONCE_KEPT_S = 3600  # longer than any id_token lives (the emulator's and the LMSs' live minutes)


def storage() -> DjangoCacheDataStorage:
    return DjangoCacheDataStorage(cache_name=CACHE)  # type: ignore[no-untyped-call]


def checked(request: HttpRequest) -> LtiLaunch:
    """The launch posted in ``request``, checked (state, signature, nonce, registration, deployment,
    message), or PyLTI1p3's LtiException saying why not."""
    message = DjangoMessageLaunch(request, DjangoToolConfig(), launch_data_storage=storage())  # type: ignore[no-untyped-call]
    message.validate()
    return LtiLaunch(message)


def kept(request: HttpRequest, launch_id: str) -> LtiLaunch:
    """A launch checked earlier in this session (the deep-linking choice comes a page later)."""
    message = DjangoMessageLaunch.from_cache(launch_id, request, DjangoToolConfig(), launch_data_storage=storage())
    return LtiLaunch(message)


def first_use(nonce: str) -> bool:
    """True the first time a launch's nonce is seen: PyLTI1p3 takes the same id_token again while its
    state is kept (a reload), and a token copied to another browser must sign no one in."""
    return bool(caches[CACHE].add(f"nonce-used:{nonce}", True, timeout=NONCE_KEPT_S))
