"""Tool commands keep out of learners' conversation histories."""

from __future__ import annotations

import json
from importlib import import_module
from io import StringIO
from typing import Any

import pytest
from django.conf import settings
from django.contrib.auth import SESSION_KEY
from django.contrib.auth.models import User
from django.core.management import call_command

from labapp.accounts import local_user
from labapp.ops.measures import chat_overhead
from rag.models import Answer, Conversation

pytestmark = pytest.mark.django_db


@pytest.mark.django_db(transaction=True)  # the command's own event loop reaches the database from its threads
def test_chat_overhead_asks_as_a_throwaway_account_and_leaves_no_history(monkeypatch: pytest.MonkeyPatch) -> None:
    learner = local_user()  # the one local learner, whom a GET /chat/ would have signed the tool in as
    seen: dict[str, Any] = {}

    async def measure(options: dict[str, Any]) -> dict[str, Any]:
        # What the chat does with the command's cookie: its session's account owns the answers.
        key = options["cookie"].split("=", 1)[1]
        store = import_module(settings.SESSION_ENGINE).SessionStore(key)
        user_id = int(await _get(store, SESSION_KEY))
        seen["user"] = await User.objects.aget(pk=user_id)
        conversation = await Conversation.objects.acreate(owner_id=user_id, title="q")
        await Answer.objects.acreate(conversation=conversation, question="q", settings={})
        return {"runs": 1}

    monkeypatch.setattr(chat_overhead, "measure", measure)
    out = StringIO()
    call_command("chat_overhead", runs=1, json=True, stdout=out)
    assert json.loads(out.getvalue()) == {"runs": 1}
    assert seen["user"].pk != learner.pk and seen["user"].username.startswith(chat_overhead.TOOL_USER_PREFIX)
    assert not seen["user"].has_usable_password()
    # Afterwards: the account, its session and its answers are gone; the learner's history is untouched.
    assert not User.objects.filter(username__startswith=chat_overhead.TOOL_USER_PREFIX).exists()
    assert not Conversation.objects.exists() and not Answer.objects.exists()


async def _get(store: Any, key: str) -> Any:
    from asgiref.sync import sync_to_async

    return await sync_to_async(store.get)(key)


def test_an_explicit_cookie_is_used_as_given_and_no_account_is_made() -> None:
    with chat_overhead.tool_session("abc") as cookie:
        assert cookie == f"{settings.SESSION_COOKIE_NAME}=abc"
        assert not User.objects.filter(username__startswith=chat_overhead.TOOL_USER_PREFIX).exists()
