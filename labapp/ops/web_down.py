"""The page nginx answers with when a web process behind it dies under a request.

nginx sends a request it could not hand to one web process to the other; but a request already handed
over (a form sent, a page asked) to a process that is then killed gets no answer, and nginx cannot send
a POST again (it may have been saved). It answers 502 itself. Without this page a learner sees nginx's
bare "502 Bad Gateway"; with it, what happened and what to do, in the language they read the site in
(the language switch's cookie; Korean without it, as the site). nginx reads one file per language from
the folder ``write`` fills (``NGINX_SERVER`` is the configuration that serves it: the class rehearsal's
nginx, `make load --web-processes`' and docker/nginx.conf use it).
"""

from __future__ import annotations

from pathlib import Path

# In nginx's ``http`` block: the page's language from the switch's cookie (Django's set_language).
NGINX_MAP = "map $cookie_django_language $lab_language { default ko; en en; }"
# In its ``server`` block, with {pages} the folder ``write`` filled: only nginx's own errors get the page
# (a web process's own error pages pass through as they are).
NGINX_SERVER = """\
error_page 502 503 504 /_lab/web-down/$lab_language.html;
location /_lab/web-down/ { internal; alias {pages}/; }"""


def write(folder: Path) -> list[Path]:
    """The page once per language of the site, as ``<code>.html`` in ``folder``; the files written."""
    from django.conf import settings
    from django.template.loader import render_to_string
    from django.utils import translation

    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for code, _name in settings.LANGUAGES:
        with translation.override(code):
            page = render_to_string("web_down.html")
        (folder / f"{code}.html").write_text(page, encoding="utf-8")
        written.append(folder / f"{code}.html")
    return written
