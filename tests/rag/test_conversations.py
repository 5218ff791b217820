"""The chat's counts and lookups written for speed give the same answers as the ORM's."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.utils import timezone

from labapp.models import Classroom, Membership
from rag import access, conversations, keeper
from rag.models import Answer, Conversation

pytestmark = pytest.mark.django_db


def _answer(owner: Any, status: Answer.Status, *, age_s: float = 0) -> Answer:
    conversation = Conversation.objects.create(owner=owner, title="t")
    answer = Answer.objects.create(conversation=conversation, question="q", status=status)
    if age_s:
        Answer.objects.filter(pk=answer.pk).update(beat_at=timezone.now() - timedelta(seconds=age_s))
    return answer


def test_the_written_out_streaming_count_agrees_with_the_orm_query() -> None:
    User = get_user_model()
    learner, other = User.objects.create(username="counted"), User.objects.create(username="other")
    assert conversations.streaming_count(learner) == 0
    _answer(learner, Answer.Status.STREAMING)
    _answer(learner, Answer.Status.STREAMING)
    _answer(learner, Answer.Status.DONE)  # finished: not counted
    _answer(learner, Answer.Status.STREAMING, age_s=keeper.ORPHAN_S + 5)  # its process gone: not counted
    _answer(other, Answer.Status.STREAMING)  # someone else's: not counted
    assert conversations.streaming_count(learner) == conversations.answers_streaming(learner).count() == 2
    assert conversations.streaming_count(other) == 1
    conversations.streaming_check(learner, 3)
    with pytest.raises(conversations.TooMany):
        conversations.streaming_check(learner, 2)


def test_resolving_one_collection_agrees_with_the_list_of_collections() -> None:
    User = get_user_model()
    learner, outsider = User.objects.create(username="member"), User.objects.create(username="outsider")
    mine = Classroom.objects.create(name="A반", join_code="count-a")
    theirs = Classroom.objects.create(name="B반", join_code="count-b")
    Membership.objects.create(user=learner, classroom=mine, role=Membership.Role.LEARNER)
    Membership.objects.create(user=outsider, classroom=theirs, role=Membership.Role.LEARNER)
    for user in (learner, outsider):
        listed = access.collections_for(user)
        assert [access.collection_resolve(user, ref.key) for ref in listed] == listed
    for key in (f"class-{theirs.pk}", f"class-0{mine.pk}", "class-", "class-x", "class-" + "9" * 30, "Mine", ""):
        with pytest.raises(access.CollectionNotFound):
            access.collection_resolve(learner, key)


def test_a_follow_up_must_go_into_the_learners_own_conversation_after_one_of_its_answers() -> None:
    User = get_user_model()
    learner, other = User.objects.create(username="asker"), User.objects.create(username="someone")
    own, own_answer = _conversation_with_answer(learner)
    foreign, foreign_answer = _conversation_with_answer(other)
    conversations.follow_up_check(learner, None, None)  # a new conversation
    conversations.follow_up_check(learner, own.pk, None)
    conversations.follow_up_check(learner, own.pk, own_answer.pk)
    for conversation_id, parent_id, says in (
        (foreign.pk, None, str(foreign.pk)),  # someone else's conversation
        (foreign.pk, foreign_answer.pk, str(foreign.pk)),
        (own.pk, foreign_answer.pk, str(foreign_answer.pk)),  # a parent from another conversation
        (None, own_answer.pk, str(own_answer.pk)),  # a parent for a conversation not yet begun
    ):
        with pytest.raises(conversations.NotFound, match=says):
            conversations.follow_up_check(learner, conversation_id, parent_id)


def _conversation_with_answer(owner: Any) -> tuple[Conversation, Answer]:
    answer = _answer(owner, Answer.Status.DONE)
    return answer.conversation, answer
