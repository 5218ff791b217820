"""Which collections a user may search or add to (used by views and the chat consumer alike).

A user never reaches another user's collection: an unknown or foreign key is
"not found", never a permission hint. Every member of a class may search and
add to the class's collection; the uploader or the class's instructor may delete.
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
    from labapp.models import Membership

    refs = [CollectionRef("chapter", CHAPTER_COLLECTION, _("챕터 본문"), by_language=True)]
    if user.is_authenticated:
        refs.append(CollectionRef("mine", user_collection_name(user), _("내 문서"), by_language=False))
        for membership in Membership.objects.filter(user_id=user.pk).select_related("classroom"):
            classroom = membership.classroom
            refs.append(
                CollectionRef(
                    f"class-{classroom.pk}",
                    classroom.collection_name,
                    _("수업 자료: %(name)s") % {"name": classroom.name},
                    by_language=False,
                )
            )
    return refs


def collection_resolve(user: AbstractBaseUser | AnonymousUser, key: str) -> CollectionRef:
    for ref in collections_for(user):
        if ref.key == key:
            return ref
    raise CollectionNotFound(key)


def document_for(user: AbstractBaseUser | AnonymousUser, document_id: int, *, manage: bool = False) -> Document:
    """A document in one of the user's collections, or 404 (others do not exist for them).

    ``manage`` (deleting) needs more: the uploader, or an instructor of the class
    whose collection holds it.
    """
    if not user.is_authenticated:
        raise Http404("document not found")
    document = Document.objects.filter(pk=document_id, collection__in=documents_visible(user)).first()
    if document is None:
        raise Http404("document not found")
    if manage and not can_manage(user, document):
        raise Http404("document not found")
    return document


def can_manage(user: AbstractBaseUser | AnonymousUser, document: Document) -> bool:
    from labapp.models import Membership

    if not user.is_authenticated:
        return False
    if document.owner_id == user.pk:
        return True
    classroom_id = _classroom_id(document.collection)
    return classroom_id is not None and (
        Membership.objects.filter(user_id=user.pk, role=Membership.Role.INSTRUCTOR, classroom_id=classroom_id).exists()
    )


def document_collections(user: AbstractBaseUser | AnonymousUser) -> list[CollectionRef]:
    """Collections that hold uploaded documents (theirs and their classes'), never the shared chapter."""
    return [ref for ref in collections_for(user) if ref.name != CHAPTER_COLLECTION]


def documents_visible(user: AbstractBaseUser | AnonymousUser) -> list[str]:
    """The collections whose documents the user's document list shows."""
    return [ref.name for ref in document_collections(user)]


def _classroom_id(collection: str) -> int | None:
    prefix, _sep, number = collection.partition("-")
    return int(number) if prefix == "class" and number.isdigit() else None
