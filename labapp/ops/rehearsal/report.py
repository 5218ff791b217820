"""What a class rehearsal printed: figures and ratios, read from the shared database and the class's
own record; nothing here is a timed pass/fail (``failures`` lists only what was lost or broken).

* **makespan** of all lab runs (the first run asked → the last one ended) against the **ideal**: the
  sum of the runs' own times (started → ended) ÷ the measuring engines;
* each learner's **wait** (asked → started) p50/p95 over learners (each learner's mean wait), and
  **Jain's fairness index** over those means: (Σx)² ÷ (n·Σx²), 1 when every learner waited alike;
* lab runs **passed** (every check of the run; each run not passed listed with the checks it failed and
  what they saw) and **disturbed** (a cell measured while other traffic ran on its engine), and which
  engine measured how many;
* chat **TTFT** p50/p95 (question sent → first token frame) during the class;
* the **web fault** (``faults.fault_web``): the chat sockets on the killed process, whether each opened
  again and to which process, and each answer in flight: saved as what, with its partial text or not;
  the forms learners sent again after a 5xx or no answer;
* **5xx** in nginx's access log (those answered while a fault had a process down are the fault's);
  **lost** frames (an ask that never had its answer frame on an open socket, or a frame delivered to
  a socket it was not for; an answer that ended failed, naming why, is listed apart), runs (accepted
  but no job, or never ended) and hand-ins (accepted but no saved hand-in of that run).
"""

from __future__ import annotations

import statistics
from collections import Counter
from datetime import datetime
from typing import Any

from bench.metrics import percentile
from labapp.ops.rehearsal.learners import LABS, Class, Learner
from labapp.ops.report import aligned

LOST_ASKS = ("unanswered", "timeout")  # a chat ask that never had its answer frame


def jain(values: list[float]) -> float | None:
    """Jain's fairness index of ``values`` (None: none); all zero counts as perfectly fair."""
    if not values:
        return None
    squares = sum(v * v for v in values)
    return 1.0 if squares == 0 else round(sum(values) ** 2 / (len(values) * squares), 3)


def _pcts(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"p50": None, "p95": None, "n": 0}
    return {"p50": round(percentile(values, 50), 1), "p95": round(percentile(values, 95), 1), "n": len(values)}


def _seconds(start: datetime | None, end: datetime | None) -> float:
    assert start is not None and end is not None
    return round((end - start).total_seconds(), 1)


def _timing(learners: list[Learner], jobs: dict[int, Any], measuring_engines: int) -> dict[str, Any]:
    """Makespan against the ideal, one run's time, each learner's mean wait and Jain's index over them."""
    ended = [j for j in jobs.values() if j.started_at and j.finished_at]
    makespan = ideal = None
    if ended:
        first = min(j.created_at for j in jobs.values())
        makespan = max(_seconds(first, j.finished_at) for j in ended)
        ideal = round(sum(_seconds(j.started_at, j.finished_at) for j in ended) / measuring_engines, 1)
    waits: dict[str, list[float]] = {}
    for person in learners:
        mine = [jobs[i] for i in person.jobs.values() if i in jobs and jobs[i].started_at]
        waits[person.username] = [_seconds(j.created_at, j.started_at) for j in mine]
    means = [statistics.mean(w) for w in waits.values() if w]
    return {
        "makespan_s": makespan,
        "ideal_s": ideal,
        "makespan_over_ideal": round(makespan / ideal, 2) if makespan and ideal else None,
        "run_s": _pcts([_seconds(j.started_at, j.finished_at) for j in ended]),
        "wait_s": _pcts(means),
        "wait_by_learner": waits,
        "jain": jain(means),
    }


def _runs(learners: list[Learner], jobs: dict[int, Any]) -> dict[str, Any]:
    from django.utils import translation

    with translation.override("en"):  # the report is in English: engines' names and runs' errors too
        return _runs_said(learners, jobs)


def _runs_said(learners: list[Learner], jobs: dict[int, Any]) -> dict[str, Any]:
    from bench import engines
    from labapp.labs.catalog import states_for

    ids = [int(p.user_id or 0) for p in learners]
    names = {int(p.user_id or 0): p.username for p in learners}
    states = states_for(ids, list(LABS), words=False) if ids else {}
    ended = [j for j in jobs.values() if j.started_at and j.finished_at]
    return {
        "posted": sum(len(p.runs_posted) for p in learners),
        "jobs": len(jobs),
        "status": dict(Counter(j.status for j in jobs.values())),
        "passed": sum(1 for s in states.values() if s.checked_job is not None and s.passed),
        "not_passed": [
            _failed_checks(names.get(user_id, str(user_id)), user_id, lab)
            for (user_id, lab), s in states.items()
            if s.checked_job is not None and not s.passed
        ],
        "disturbed": sum(1 for j in ended if j.status == "done" and j.disturbed_cells),
        "by_engine": dict(Counter(str(engines.name_of(j.engine_url)) for j in ended)),
        "failed": [f"#{j.pk} {j.error_shown[:160]}" for j in jobs.values() if j.status == "failed"],
        # A run may fail when its engine dies (a fault): then it must name the engine, and the
        # learner's run again (``learners._lab``) must end done.
        "failed_unnamed": [
            f"#{j.pk}" for j in jobs.values() if j.status == "failed" and j.engine_url.rstrip("/") not in j.error
        ],
        "last_not_done": [
            f"{p.username} lab {lab} #{pk} {jobs[pk].status if pk in jobs else 'missing'}"
            for p in learners
            for lab, pk in p.jobs.items()
            if pk not in jobs or jobs[pk].status != "done"
        ],
    }


def _failed_checks(username: str, user_id: int, lab: int) -> str:
    """Which checks of the learner's latest run of ``lab`` failed, with what each saw."""
    from labapp.labs.catalog import state_for

    state = state_for(user_id, lab)
    failed = "; ".join(f"{check.name}: {check.message}" for check in state.checks if check.failed)
    return f"{username} lab {lab} #{state.checked_job.pk}: {failed or state.missing}"


def _losses(klass: Class, learners: list[Learner], jobs: dict[int, Any], access_log: list[str]) -> dict[str, Any]:
    """Runs, hand-ins and chat frames lost; the 5xx nginx answered."""
    from labapp.models import LabSubmission

    ids = [int(p.user_id or 0) for p in learners]
    no_job = sum(1 for p in learners for lab in p.runs_posted if lab not in p.jobs)
    unfinished = [f"#{j.pk} {j.status}" for j in jobs.values() if j.status in ("queued", "running")]
    handed = {(s.user_id, s.lab): s.job_id for s in LabSubmission.objects.filter(user_id__in=ids, lab__in=LABS)}
    accepted = [(p, lab) for p in learners for lab, ok in p.handed.items() if ok]
    lost_handins = [
        f"{p.username} lab {lab}" for p, lab in accepted if handed.get((int(p.user_id or 0), lab)) != p.jobs.get(lab)
    ]
    # Lost: no answer frame at all (still waiting, or timed out). An answer that ended failed with its
    # error named (the router down, say) reached its asker: the chat's "failed, named" below.
    lost_asks = [f"{a.client_id}: {a.status} {a.error[:100]}" for a in klass.chat.asks if a.status in LOST_ASKS]
    fivexx = [line[:160] for line in access_log if line[:3].isdigit() and int(line[:3]) >= 500]
    return {
        "http_5xx": len(fivexx),
        "http_5xx_lines": fivexx[:20],
        "lost": {
            "frames": len(lost_asks) + len(klass.chat.misdelivered),
            "frames_detail": (lost_asks + klass.chat.misdelivered)[:20],
            "runs": no_job + len(unfinished),
            "runs_detail": unfinished[:20],
            "hand_ins": len(lost_handins),
            "hand_ins_detail": lost_handins[:20],
        },
        "handed_in": {"accepted": len(accepted), "saved": len(handed)},
    }


def report_build(
    klass: Class, *, class_s: float, measuring_engines: int, access_log: list[str], setup: dict[str, Any]
) -> dict[str, Any]:
    from bench.models import BenchJob

    learners = [p for p in klass.learners if p.user_id is not None]
    ids = [int(p.user_id or 0) for p in learners]
    jobs = {j.pk: j for j in BenchJob.objects.filter(owner_id__in=ids, lab__in=LABS)}
    asks = klass.chat.asks
    return (
        {
            "setup": setup,
            "class_s": class_s,
            "learners": {"asked": len(klass.learners), "signed_up": sum(p.signed_up for p in klass.learners)},
            "runs": _runs(learners, jobs),
            "chat": {
                "asked": len(asks),
                "done": sum(a.status == "done" for a in asks),
                "cut_by_closed_socket": sum(a.status == "closed" for a in asks),
                "failed_named": [
                    f"{a.client_id}: {a.status} {a.error[:120]}"
                    for a in asks
                    if a.status not in ("done", "closed", *LOST_ASKS)
                ][:20],
                "sockets_reopened": klass.reopened,
                "ttft_ms": _pcts([a.ttft_ms for a in asks if a.ttft_ms is not None]),
            },
            "pages": {"requests": len(klass.pages), "ms": _pcts([ms for *_x, ms in klass.pages])},
            "gradebook": {k: v for k, v in klass.gradebook.items() if k != "ms"}
            | {"ms": _pcts(klass.gradebook.get("ms", []))},
            "learner_errors": [f"{p.username}: {e}" for p in klass.learners for e in p.errors][:40],
            "forms_sent_again": [f"{p.username}: {r}" for p in klass.learners for r in p.retried][:40],
        }
        | _timing(learners, jobs, measuring_engines)
        | _losses(klass, learners, jobs, access_log)
    )


def _web_failures(web: dict[str, Any]) -> list[str]:
    """The web fault's: a socket on the killed process that never opened again; an answer cut in flight
    not saved "stopped" with the text it had streamed, as far as its last write (``rag.keeper``)."""
    found = []
    stuck = [s["learner"] for s in web.get("sockets", []) if not s["reopened"]]
    if stuck:
        found.append(f"web fault: chat sockets on {web['killed']} never opened again: {stuck}")
    unsaved = [
        f"answer {a['answer']} ({a['learner']}): saved {a['saved_status']} with {a['saved_chars']} of the "
        f"{a['page_showed_chars']} characters its page showed"
        for a in web.get("answers_in_flight", [])
        if a["cut"] and (a["saved_status"] != "stopped" or not a["partial_text_kept"])
    ]
    if unsaved:
        found.append(f"web fault: answers in flight not saved stopped with their partial text: {unsaved}")
    return found


def failures(report: dict[str, Any]) -> list[str]:
    """What was lost or broken (the reduced rehearsal in `make test` asserts what); never a speed."""
    found = []
    faults = {name: f for name, f in report.get("faults", {}).items() if isinstance(f, dict)}
    lost = report["lost"]
    for what in ("frames", "runs", "hand_ins"):
        if lost[what]:
            found.append(f"lost {what}: {lost[what]} {lost[what + '_detail']}")
    during = sum(int(f.get("5xx_meanwhile", 0)) for f in faults.values())  # nginx's 502 for a request in flight
    if report["http_5xx"] > during:
        found.append(f"{report['http_5xx'] - during} responses 5xx outside a fault: {report['http_5xx_lines']}")
    signed = report["learners"]
    if signed["signed_up"] != signed["asked"]:
        found.append(f"{signed['asked'] - signed['signed_up']} learners could not sign up")
    runs = report["runs"]
    if runs["status"].get("done", 0) != len(LABS) * signed["asked"] or runs["last_not_done"]:
        found.append(f"runs: {runs['jobs']} made, {runs['status']}; not done: {runs['last_not_done']}")
    if runs["failed_unnamed"]:
        found.append(f"runs failed without naming their engine: {runs['failed_unnamed']} {runs['failed']}")
    if report["handed_in"]["saved"] != len(LABS) * signed["asked"]:
        found.append(f"hand-ins saved: {report['handed_in']['saved']} of {len(LABS) * signed['asked']}")
    if report["jain"] is None:
        found.append("Jain's index could not be computed (no run started)")
    if report["learner_errors"]:
        found.append(f"learners' errors: {report['learner_errors']}")
    if "web" in faults:
        found += _web_failures(faults["web"])
    return found


def _f(value: Any, unit: str = "") -> str:
    return "—" if value is None else f"{value}{unit}"


def _pair(pcts: dict[str, Any], unit: str) -> str:
    return f"{_f(pcts['p50'], unit)} / {_f(pcts['p95'], unit)}"


def _web_row(web: dict[str, Any]) -> str:
    if "sockets" not in web:
        return str(web)[:300]
    back = [s for s in web["sockets"] if s["reopened"]]
    flying = [a for a in web["answers_in_flight"] if a["cut"]]
    kept = sum(a["partial_text_kept"] and a["saved_status"] == "stopped" for a in flying)
    return (
        f"{web['killed']}, {web['why_then']}: {len(back)}/{len(web['sockets'])} sockets on it opened again "
        f"(to {dict(Counter(s['to'] for s in back))}, after {[s['after_s'] for s in back]} s); "
        f"{len(flying)} answers cut in flight, saved {dict(Counter(a['saved_status'] for a in flying))}, "
        f"stopped with their partial text {kept}/{len(flying)}, asked again {[a['asked_again'] for a in flying]}; "
        f"{web['misdelivered_meanwhile']} frames misdelivered; {web['5xx_meanwhile']} 5xx while down, "
        f"{web['forms_sent_again']} forms sent again"
    )


def _delivered(tasks: int | None, jobs: int) -> str:
    if tasks is None:
        return "—"
    return f"{tasks} for {jobs} runs" + (f" ({tasks / jobs:.1f} a run)" if jobs else "")


def table(report: dict[str, Any]) -> str:
    runs, chat, lost, book = report["runs"], report["chat"], report["lost"], report["gradebook"]
    ratio = _f(report["makespan_over_ideal"])
    listed = book.get("learners_listed", 0)
    rows = [
        ("setup", ", ".join(f"{k}={v}" for k, v in report["setup"].items())),
        ("learners signed up", f"{report['learners']['signed_up']}/{report['learners']['asked']}"),
        ("class time", _f(report["class_s"], " s")),
        ("lab runs", f"{runs['jobs']} ({runs['status']}), by engine {runs['by_engine']}"),
        ("one run's time p50/p95", _pair(report["run_s"], " s")),
        ("makespan / ideal", f"{_f(report['makespan_s'], ' s')} / {_f(report['ideal_s'], ' s')} = {ratio}"),
        ("learner wait p50/p95", _pair(report["wait_s"], " s") + " (each learner's mean wait)"),
        ("Jain's fairness index", _f(report["jain"])),
        ("job_run tasks delivered", _delivered(report.get("job_tasks_delivered"), runs["jobs"])),
        ("runs passed / disturbed", f"{runs['passed']} / {runs['disturbed']} of {runs['jobs']}"),
        *[("  not passed", line[:300]) for line in runs.get("not_passed", [])],
        ("hand-ins accepted / saved", f"{report['handed_in']['accepted']} / {report['handed_in']['saved']}"),
        (
            "chat answers done",
            f"{chat['done']}/{chat['asked']} ({chat['cut_by_closed_socket']} cut by a socket, "
            f"{len(chat['failed_named'])} failed naming why: {chat['failed_named'][:3]})",
        ),
        ("chat TTFT p50/p95", _pair(chat["ttft_ms"], " ms")),
        ("pages p50/p95", _pair(report["pages"]["ms"], " ms") + f" of {report['pages']['requests']}"),
        ("gradebook", f"{book.get('reads', 0)} reads, p50 {_f(book['ms']['p50'], ' ms')}, lists {listed} learners"),
        ("5xx", str(report["http_5xx"])),
        ("lost frames / runs / hand-ins", f"{lost['frames']} / {lost['runs']} / {lost['hand_ins']}"),
        ("forms sent again", f"{len(report['forms_sent_again'])}: {report['forms_sent_again'][:4]}"),
    ]
    web = report.get("faults", {}).get("web")
    if isinstance(web, dict):
        rows.append(("web fault", _web_row(web)))
    return aligned(rows)
