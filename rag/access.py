"""Which collections a user may search or add to (used by views and the chat consumer alike).

A user never reaches another user's collection: an unknown or foreign key is
"not found", never a permission hint. Class collections arrive with classes.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.http import Http404
from django.utils.translation import gettext as _

from rag.models import Document
from rag.services import CHAPTER_COLLECTION


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


def collections_for(user: AbstractBaseUser | AnonymousUser) -> list[CollectionRef]:
    refs = [CollectionRef("chapter", CHAPTER_COLLECTION, _("챕터 본문"), by_language=True)]
    if user.is_authenticated:
        refs.append(CollectionRef("mine", user_collection_name(user), _("내 문서"), by_language=False))
    return refs


def collection_resolve(user: AbstractBaseUser | AnonymousUser, key: str) -> CollectionRef:
    for ref in collections_for(user):
        if ref.key == key:
            return ref
    raise CollectionNotFound(key)


def document_for(user: AbstractBaseUser | AnonymousUser, document_id: int) -> Document:
    """The user's own document, or 404 (another user's document does not exist for them)."""
    if not user.is_authenticated:
        raise Http404("document not found")
    document = Document.objects.filter(pk=document_id, owner_id=user.pk).first()
    if document is None:
        raise Http404("document not found")
    return document
