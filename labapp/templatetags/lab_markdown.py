from django import template
from django.utils.safestring import SafeString, mark_safe
from markdown_it import MarkdownIt

register = template.Library()
# Raw HTML in the source is escaped, never passed through.
_md = MarkdownIt("commonmark", {"html": False}).enable("table")


@register.filter
def markdown(text: str) -> SafeString:
    return mark_safe(str(_md.render(text)))  # noqa: S308 - html=False escapes any markup in text
