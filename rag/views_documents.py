"""Uploads, ingestion progress, chunk preview and the retrieval-only test page."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import PurePath
from typing import Any, cast

from asgiref.sync import async_to_sync
from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils.translation import get_language, gettext_lazy
from django.utils.translation import gettext as _
from django.views.decorators.http import require_POST

from labapp import addresses
from rag import chunking, retrieval, services
from rag.access import (
    CollectionRef,
    collection_resolve,
    collections_for,
    document_for,
    documents_visible,
    may_manage_document,
    upload_collections,
)
from rag.documents import ALLOWED_LABEL, MAX_LABEL, DocumentRejected, document_kind, too_large, upload_text
from rag.models import Document, IndexedSource
from rag.vectorstore import RetrievalUnavailable
from rag.vllm import client as vllm_client

PREVIEW_PAGE_CHUNKS = 50  # token counts are asked for one page at a time
DEFAULT_CHUNK_SIZE = 500
CHUNK_SIZE_CHOICES = [(size, f"{size}") for size in chunking.CHUNK_SIZES]
MODE_CHOICES = [
    ("hybrid", gettext_lazy("하이브리드 (밀집 + BM25)")),
    ("dense", gettext_lazy("밀집 벡터만")),
    ("lexical", gettext_lazy("BM25 어휘 검색만")),
]


def _user(request: HttpRequest) -> AbstractBaseUser:
    # login_required has run: the user is a signed-in account.
    return cast(AbstractBaseUser, request.user)


@dataclass(frozen=True)
class Upload:
    filename: str
    kind: str
    size_bytes: int
    text: str  # "" for a PDF: the worker reads it from ``raw``
    raw: bytes


class DocumentUploadForm(forms.Form):
    file = forms.FileField(
        label=gettext_lazy("파일"),
        max_length=255,
        allow_empty_file=True,  # an empty file gets the same clear reason as any other rejection
        widget=forms.ClearableFileInput(attrs={"accept": ".txt,.md,.markdown,.pdf,text/plain,text/markdown"}),
    )
    collection = forms.ChoiceField(label=gettext_lazy("넣을 곳"))

    def __init__(self, *args: Any, user: AbstractBaseUser | AnonymousUser, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.refs = {ref.key: ref for ref in upload_collections(user)}
        field = cast(forms.ChoiceField, self.fields["collection"])
        field.choices = [(key, ref.label) for key, ref in self.refs.items()]
        self.upload: Upload | None = None

    def clean_file(self) -> Any:
        uploaded = self.cleaned_data["file"]
        filename = PurePath(uploaded.name or "").name
        try:
            document_kind(filename)  # before reading: a wrong type is rejected whatever its size
            if (rejected := too_large(uploaded.size or 0)) is not None:
                raise rejected
            data = uploaded.read()
            kind, text = upload_text(filename, data)
        except DocumentRejected as exc:
            raise forms.ValidationError(exc.reason, code="rejected") from exc
        raw = data if kind == "pdf" else b""
        self.upload = Upload(filename=filename, kind=kind, size_bytes=len(data), text=text, raw=raw)
        return uploaded

    def collection_ref(self) -> CollectionRef:
        return self.refs[self.cleaned_data["collection"]]


def _rows_context(user: AbstractBaseUser) -> dict[str, Any]:
    services.documents_reap_stale()  # a lost worker's document does not say "ingesting" for hours
    documents = list(Document.objects.filter(collection__in=documents_visible(user)).defer("text", "raw"))
    labels = {ref.name: ref.label for ref in collections_for(user)}
    for document in documents:
        document.collection_label = labels.get(document.collection, document.collection)  # type: ignore[attr-defined]
        document.can_manage = may_manage_document(user, document)  # type: ignore[attr-defined]
    busy = any(d.status in (Document.Status.QUEUED, Document.Status.INGESTING) for d in documents)
    return {"documents": documents, "busy": busy, "chunk_sizes": chunking.CHUNK_SIZES}


@login_required
def document_list(request: HttpRequest) -> HttpResponse:
    user = _user(request)
    if request.method == "POST":
        form = DocumentUploadForm(request.POST, request.FILES, user=user)
    else:
        form = DocumentUploadForm(user=user)
    if form.is_bound and form.is_valid() and form.upload is not None:
        upload = form.upload
        try:
            services.document_upload(
                owner=user,
                collection=form.collection_ref().name,
                filename=upload.filename,
                kind=upload.kind,
                size_bytes=upload.size_bytes,
                text=upload.text,
                raw=upload.raw,
            )
        except DocumentRejected as exc:  # not theirs to add to or replace, or over their quota
            form.add_error(None, exc.reason)
        else:
            messages.success(
                request, _("%(name)s을(를) 올렸습니다. 색인이 끝나면 검색됩니다.") % {"name": upload.filename}
            )
            return redirect("document_list")
    context = {"form": form, "allowed": ALLOWED_LABEL, "max_size": MAX_LABEL, **_rows_context(user)}
    return render(request, "rag/documents.html", context)


@login_required
def document_rows(request: HttpRequest) -> HttpResponse:
    """The document table alone: htmx polls it while something is being ingested."""
    return render(request, "rag/document_rows.html", _rows_context(_user(request)))


@login_required
@require_POST
def document_delete(request: HttpRequest, document_id: int) -> HttpResponse:
    document = document_for(request.user, document_id, manage=True)
    try:
        services.document_delete(document=document)
    except RetrievalUnavailable as exc:
        messages.error(
            request, _("삭제하지 못했습니다. 검색 저장소에 연결할 수 없습니다 (Chroma): %(error)s") % {"error": exc}
        )
    else:
        messages.success(request, _("%(name)s을(를) 삭제했습니다.") % {"name": document.filename})
    return redirect("document_list")


class PreviewForm(forms.Form):
    size = forms.TypedChoiceField(label=gettext_lazy("청크 크기"), choices=CHUNK_SIZE_CHOICES, coerce=int)


@dataclass(frozen=True)
class PreviewChunk:
    index: int
    start: int
    end: int
    text: str
    tokens: int | None


@login_required
def document_preview(request: HttpRequest, document_id: int) -> HttpResponse:
    document = document_for(request.user, document_id)
    form = PreviewForm(request.GET if "size" in request.GET else {"size": DEFAULT_CHUNK_SIZE})
    size = form.cleaned_data["size"] if form.is_valid() else DEFAULT_CHUNK_SIZE
    chunks = chunking.split(document.text, size=size)
    page = Paginator(chunks, PREVIEW_PAGE_CHUNKS).get_page(request.GET.get("page"))
    shown: list[chunking.Chunk] = list(page.object_list)
    counts: list[int | None] = [None] * len(shown)
    token_error = ""
    model = ""
    if shown:
        try:
            model = vllm_client.model_name()
            counts = list(async_to_sync(vllm_client.count_tokens)([c.text for c in shown], model=model))
        except vllm_client.EngineUnavailable as exc:
            token_error = addresses.scrubbed(str(exc))
    rows = [PreviewChunk(c.index, c.start, c.end, c.text, n) for c, n in zip(shown, counts, strict=True)]
    context = {
        "document": document,
        "form": form,
        "size": size,
        "chunk_sizes": chunking.CHUNK_SIZES,
        "chunk_total": len(chunks),
        "page": page,
        "rows": rows,
        "model": model,
        "token_error": token_error,
        "page_tokens": sum(n for n in counts if n is not None) if not token_error else None,
    }
    return render(request, "rag/document_preview.html", context)


class RetrievalForm(forms.Form):
    question = forms.CharField(label=gettext_lazy("질문"), max_length=1000, strip=True)
    collection = forms.ChoiceField(label=gettext_lazy("검색할 자료"))
    chunk_size = forms.TypedChoiceField(label=gettext_lazy("청크 크기"), choices=CHUNK_SIZE_CHOICES, coerce=int)
    top_k = forms.IntegerField(label=gettext_lazy("가져올 청크 수 (top-k)"), min_value=1, max_value=20)
    mode = forms.ChoiceField(label=gettext_lazy("검색 방식"), choices=MODE_CHOICES)

    def __init__(self, *args: Any, user: AbstractBaseUser | AnonymousUser, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        field = cast(forms.ChoiceField, self.fields["collection"])
        field.choices = [(ref.key, ref.label) for ref in collections_for(user)]


@login_required
def retrieval_test(request: HttpRequest) -> HttpResponse:
    """Retrieval alone, no language model: what the chat would put in front of the question."""
    user = _user(request)
    has_documents = Document.objects.filter(owner_id=user.pk, status=Document.Status.READY).exists()
    defaults = {
        "collection": "mine" if has_documents else "chapter",
        "chunk_size": DEFAULT_CHUNK_SIZE,
        "top_k": 5,
        "mode": "hybrid",
    }
    if "question" in request.GET:
        form = RetrievalForm(defaults | request.GET.dict(), user=user)
    else:
        form = RetrievalForm(initial=defaults, user=user)
    result: retrieval.RetrievalResult | None = None
    error = ""
    empty = False
    ref: CollectionRef | None = None
    if form.is_bound and form.is_valid():
        data = form.cleaned_data
        ref = collection_resolve(user, data["collection"])
        language = (get_language() or "ko") if ref.by_language else None
        indexed = IndexedSource.objects.filter(collection=ref.name, chunk_size=data["chunk_size"], chunk_count__gt=0)
        if not indexed.exists():
            empty = True
        else:
            try:
                result = retrieval.retrieve(
                    data["question"],
                    collection=ref.name,
                    chunk_size=data["chunk_size"],
                    top_k=data["top_k"],
                    language=language,
                    mode=cast(retrieval.Mode, data["mode"]),
                )
            except RetrievalUnavailable as exc:
                error = addresses.scrubbed(str(exc))
    context = {"form": form, "result": result, "error": error, "empty": empty, "collection": ref}
    return render(request, "rag/retrieval.html", context)
