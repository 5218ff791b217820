from django.urls import path

from rag import views, views_documents

urlpatterns = [
    # chat (rag/views.py)
    path("chat/", views.chat_new, name="chat_new"),
    path("chat/history/", views.chat_history, name="chat_history"),
    path("chat/<int:conversation_id>/", views.chat_conversation, name="chat_conversation"),
    path("passage/", views.passage, name="passage"),
    # documents and retrieval test page (rag/views_documents.py)
    path("documents/", views_documents.document_list, name="document_list"),
    path("documents/rows/", views_documents.document_rows, name="document_rows"),
    path("documents/<int:document_id>/preview/", views_documents.document_preview, name="document_preview"),
    path("documents/<int:document_id>/delete/", views_documents.document_delete, name="document_delete"),
    path("retrieval/", views_documents.retrieval_test, name="retrieval_test"),
]
