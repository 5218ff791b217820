"""Every action that makes rows or sends requests outside, found in the source from one place, each under
a limit or bounded by what it is (docs/operations.md, "Cheap actions with a cost").

The walk reads the code with ``ast``: a call that makes rows (``.create``, ``create_user``,
``get_or_create``, ``update_or_create``, ``bulk_create``), queues a Celery task (``.delay``,
``.apply_async``) anywhere in the apps, or, in an entry point (a view, consumer or the team demo),
a call into the vLLM client, the vector store, retrieval or the engine probes. A new one fails
this test until it is listed below with what bounds it.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
APPS = ("labapp", "rag", "bench", "lti")
SKIPPED = ("migrations", "management", "ops")  # schema, operator commands and self-measuring tools
MAKES_ROWS = {"create", "create_user", "get_or_create", "update_or_create", "bulk_create", "delay", "apply_async"}
OUTSIDE = {"vllm_client", "vectorstore", "retrieval", "engines"}
OUTBOUND = {"probed", "probe_all", "retrieve"}  # engines.* and retrieval.* calls that leave the process

# function -> what bounds it (docs/operations.md tables the same)
BOUNDED: dict[str, str] = {
    # rows made by anyone with a join code
    "labapp.classes.services.learner_signup": "throttle: SIGNUPS_PER_ADDRESS_PER_HOUR and JOINS_PER_CLASS_PER_MINUTE",
    "labapp.classes.services.classroom_join": "throttle: JOINS_PER_CLASS_PER_MINUTE; one row per (user, class)",
    # rows made by signed-in learners, each under a per-account limit
    "bench.services.job_create": "BENCH_MAX_ACTIVE_JOBS_PER_USER queued + running (lab runs and the demo too)",
    "bench.services.jobs_reap_stale": "one task per job silent BENCH_STALE_S, sent only by the update that requeues it",
    "bench.tasks.hand_on": "one task per run that ended: the queue's next run's (a worker's, never a request's)",
    "rag.services.document_upload": "DOCUMENTS_MAX_PER_USER files and DOCUMENTS_MAX_MB_PER_USER MB",
    "bench.services._imported_job": "IMPORTED_MAX_PER_USER imported runs; MAX_RUNS runs a file of MAX_BYTES",
    "rag.services.document_ingest": "one run per uploaded document (re-queued only when superseded)",
    "rag.services.source_index": "one IndexedSource per (collection, document)",
    "rag.conversations.answer_start": "CHAT_MAX_CONCURRENT_PER_USER answers streaming at once",
    "labapp.labs.services.lab_submit": "one hand-in per (learner, lab): update_or_create",
    # rows made only by instructors and admins
    "labapp.classes.services.classroom_create": "may_create_class: admins and instructors only",
    "labapp.classes.services.assignment_create": "may_manage_class: the class's instructors only",
    "labapp.classes.services.password_set_temporary": "may_reset_password; one row per learner",
    "labapp.classes.roster.roster_import": "instructors only; roster.MAX_ROWS rows a file",
    "bench.engines.engine_add": "may_register_engine; one row per name and per address",
    # rows made at start-up or by commands
    "labapp.accounts.local_user": "local mode's one user, made once",
    "labapp.chapter.services.chapter_load": "one row per chapter file",
    # rows made by an LMS launch, only after django-lti checked its signed id_token (one nonce, one launch)
    "lti.services.account_for": "one account per LMS user (registration, sub)",
    "lti.services.class_for": "one class per LMS course (deployment, context)",
    "lti.services.member_set": "one row per (user, class)",
    "lti.services.link_from_launch": "one row per LMS resource link",
    "lti.services.assignment_place": "instructors' deep-linking launches only; one row per (class, lab)",
    "lti.grades.send": "one row per (hand-in, LMS grade column); one score request per hand-in or instructor resend",
    # requests out of the process from a page load
    "bench.views_engines.engine_list": "engines.probed: one probe per engine per ENGINE_PROBE_CACHE_S",
    "bench.views.engine_max_model_len": "one 2 s request to the configured engine when a job form is checked",
    "rag.views_documents.document_preview": "one tokenize request (a page of chunks) to the configured engine",
    "rag.views_documents.retrieval_test": "one search (embedding + Chroma) per submitted form, top-k bounded",
    "rag.views.passage": "one Chroma read of one chunk id",
}


def _entry_point(path: Path) -> bool:
    return path.name.startswith(("views", "consumers")) or path.name == "demo.py"


def _calls(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
    found: set[str] = set()
    for function in ast.walk(tree):
        if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        for call in ast.walk(function):
            if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and _costs(call.func, path):
                found.add(f"{module}.{function.name}")
    return found


def _costs(func: ast.Attribute, path: Path) -> bool:
    if func.attr in MAKES_ROWS:
        return True
    owner = func.value.id if isinstance(func.value, ast.Name) else ""
    if not _entry_point(path) or owner not in OUTSIDE:
        return False
    return owner in ("vllm_client", "vectorstore") or func.attr in OUTBOUND


def walked() -> set[str]:
    found: set[str] = set()
    for app in APPS:
        for path in sorted((ROOT / app).rglob("*.py")):
            if not any(part in SKIPPED for part in path.relative_to(ROOT).parts):
                found |= _calls(path)
    return found


def test_every_action_that_makes_rows_or_sends_requests_is_listed_with_its_bound() -> None:
    found = walked()
    assert not found - BOUNDED.keys(), f"unlisted (say what bounds each): {sorted(found - BOUNDED.keys())}"
    assert not BOUNDED.keys() - found, f"listed but gone: {sorted(BOUNDED.keys() - found)}"
