"""Resolvers of the retrieval and chat side: collections, documents, conversations and answers.

Used by views and the chat consumer alike; the rules are ``labapp.access``'s predicates.
A user never reaches another user's collection, document or conversation: an unknown
or foreign one is "not found", never a permission hint. Every member of a class may
search the class's collection, but only its instructors (and admins) upload into it:
its text goes into every member's chat prompt. A learner uploads into their own
collection. A re-upload replaces only the uploader's own file of that name; the
uploader or an instructor of the class may delete a document. A conversation and its
answers belong to their owner alone (an instructor reads a learner's answers through
the class pages, not here).
"""

from __future__ import annotations

from dataclasses import dataclass

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db.models import QuerySet
from django.http import Http404
from django.utils.translation import gettext as _

from labapp import request_numbers
from labapp.access import classes_of, may_add_class_material, teaches
from labapp.models import Classroom
from rag.models import CHAPTER_COLLECTION, Answer, Conversation, Document


class CollectionNotFound(LookupError):
    pass


@dataclass(frozen=True)
class CollectionRef:
    key: str  # what forms and websocket frames carry
    name: str  # the Chroma collection
    label: str
    by_language: bool  # the chapter holds every language; filter to the page's


def user_collection_name(user: AbstractBaseUser | AnonymousUser) -> str:
    return f"user-{user.pk}"


def _chapter_ref() -> CollectionRef:
    return CollectionRef("chapter", CHAPTER_COLLECTION, _("챕터 본문"), by_language=True)


def _mine_ref(user: AbstractBaseUser | AnonymousUser) -> CollectionRef:
    return CollectionRef("mine", user_collection_name(user), _("내 문서"), by_language=False)


def _class_ref(classroom: Classroom) -> CollectionRef:
    label = _("수업 자료: %(name)s") % {"name": classroom.name}
    return CollectionRef(f"class-{classroom.pk}", classroom.collection_name, label, by_language=False)


def collections_for(user: AbstractBaseUser | AnonymousUser) -> list[CollectionRef]:
    refs = [_chapter_ref()]
    if user.is_authenticated:
        refs.append(_mine_ref(user))
        refs += [_class_ref(classroom) for classroom in classes_of(user).order_by("pk")]
    return refs


def collection_resolve(user: AbstractBaseUser | AnonymousUser, key: str) -> CollectionRef:
    """The collection ``key`` names, if ``user`` may search it; else ``CollectionNotFound``. The same
    answer as looking it up in ``collections_for``, but the chapter and the user's own collection need
    no query and a class's only its own: the chat resolves one at every question."""
    if key == "chapter":
        return _chapter_ref()
    if not user.is_authenticated:
        raise CollectionNotFound(key)
    if key == "mine":
        return _mine_ref(user)
    number = key.removeprefix("class-")
    if number == key or not number.isdecimal() or len(number) > 18 or number != str(int(number)):
        raise CollectionNotFound(key)
    classroom = classes_of(user).filter(pk=int(number)).first()
    if classroom is None:
        raise CollectionNotFound(key)
    return _class_ref(classroom)


def collection_for(user: AbstractBaseUser | AnonymousUser, key: str) -> CollectionRef:
    """``collection_resolve`` for a page: an unknown or foreign key is 404."""
    try:
        return collection_resolve(user, key)
    except CollectionNotFound:
        raise Http404("collection not found") from None


def document_for(user: AbstractBaseUser | AnonymousUser, document_id: int, *, manage: bool = False) -> Document:
    """A document in one of the user's collections, or 404 (others do not exist for them).

    ``manage`` (deleting) needs more: the uploader, or an instructor of the class
    whose collection holds it.
    """
    if not user.is_authenticated:
        raise Http404("document not found")
    document = Document.objects.filter(pk=document_id, collection__in=documents_visible(user)).defer("raw").first()
    if document is None:
        raise Http404("document not found")
    if manage and not may_manage_document(user, document):
        raise Http404("document not found")
    return document


def may_manage_document(user: AbstractBaseUser | AnonymousUser, document: Document) -> bool:
    """Delete it: the uploader, or an instructor of the class whose collection holds it."""
    if not user.is_authenticated:
        return False
    if document.owner_id == user.pk:
        return True
    classroom_id = _classroom_id(document.collection)
    return classroom_id is not None and teaches(user, classroom_id)


def may_upload_into(user: AbstractBaseUser | AnonymousUser, collection: str) -> bool:
    """Upload into ``collection`` (a Chroma name): one's own, or a class's for its instructors and admins."""
    if not user.is_authenticated:
        return False
    if collection == user_collection_name(user):
        return True
    classroom_id = _classroom_id(collection)
    return classroom_id is not None and may_add_class_material(user, classroom_id)


def may_replace_document(user: AbstractBaseUser | AnonymousUser, document: Document) -> bool:
    """Upload a file of the same name over ``document``: its uploader only (never a takeover)."""
    return user.is_authenticated and document.owner_id == user.pk


def upload_collections(user: AbstractBaseUser | AnonymousUser) -> list[CollectionRef]:
    """The collections the upload form offers: the user's own and the classes they may add material to."""
    return [ref for ref in document_collections(user) if may_upload_into(user, ref.name)]


def document_collections(user: AbstractBaseUser | AnonymousUser) -> list[CollectionRef]:
    """Collections that hold uploaded documents (theirs and their classes'), never the shared chapter."""
    return [ref for ref in collections_for(user) if ref.name != CHAPTER_COLLECTION]


def documents_visible(user: AbstractBaseUser | AnonymousUser) -> list[str]:
    """The collections whose documents the user's document list shows."""
    return [ref.name for ref in document_collections(user)]


def _classroom_id(collection: str) -> int | None:
    prefix, _sep, number = collection.partition("-")
    return request_numbers.whole(number) if prefix == "class" else None


def conversations_visible(user: AbstractBaseUser | AnonymousUser) -> QuerySet[Conversation]:
    """The user's own conversations (none for an anonymous visitor)."""
    if not user.is_authenticated:
        return Conversation.objects.none()
    return Conversation.objects.filter(owner_id=user.pk)


def answers_visible(user: AbstractBaseUser | AnonymousUser) -> QuerySet[Answer]:
    """The answers in the user's own conversations."""
    if not user.is_authenticated:
        return Answer.objects.none()
    return Answer.objects.filter(conversation__owner_id=user.pk)


def conversation_for(user: AbstractBaseUser | AnonymousUser, conversation_id: int) -> Conversation:
    """The user's conversation, or 404."""
    conversation = conversations_visible(user).filter(pk=conversation_id).first()
    if conversation is None:
        raise Http404("conversation not found")
    return conversation
