"""The course site's own Sphinx extension (site/conf.py loads it).

- Code and outputs wrap instead of scrolling sideways: every line of a highlighted block is a
  `<span class="cl" style="--i:N">` (N: the line's own indentation, in characters), and
  course.css gives each such line a hanging indent: a wrapped line goes on N + 4 characters in,
  with a thin bar in front of the continuation (the indent marker). Copying still gives the code.
- The search in Chinese (conf.py: html_search_language = "zh"): Sphinx's Chinese search, with jieba
  given only the runs of Chinese characters. Sphinx hands jieba every text node, code included, and
  takes English words with its own pattern anyway: the same Chinese words come out, in 1/70 of
  the time (1.5 s of the build's CPU).
- The two editions (English at the site's root, Chinese under zh/): each page links its twin
  (``language_twin``); course.js shows the link as a switcher in the page's header.
- Figures of the stored outputs (tools/build_site.py gives them the class `course-figure` and an alt
  text) are links to the full-size PNG: a click opens the figure at full size.
"""
from __future__ import annotations

import re

from pygments.formatters import HtmlFormatter
from sphinx.highlighting import PygmentsBridge
from sphinx.search.zh import SearchChinese, cut_for_search

TAG = re.compile(r"<[^>]+>")
CJK_RUN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+")


class SearchChineseRuns(SearchChinese):
    """Sphinx's `zh` search, jieba run on the Chinese text only (see the module's docstring)."""

    def split(self, input: str) -> list[str]:
        chinese = [word for run in CJK_RUN.findall(input) for word in cut_for_search(run)]
        latin1 = [term.strip() for term in self.latin1_letters.findall(input)]
        self.latin_terms.update(latin1)
        return chinese + latin1


class LineSpanFormatter(HtmlFormatter):
    """Pygments' HTML formatter with each source line in its own span (see the module's docstring)."""

    def wrap(self, source, *args, **kwargs):
        return super().wrap(self._line_spans(source), *args, **kwargs)

    @staticmethod
    def _line_spans(source):
        for kind, line in source:
            if kind != 1:
                yield kind, line
                continue
            body, nl = (line[:-1], "\n") if line.endswith("\n") else (line, "")
            text = TAG.sub("", body)
            indent = len(text) - len(text.lstrip(" "))
            style = f' style="--i:{indent}"' if indent else ""
            yield kind, f'<span class="cl"{style}>{body}</span>{nl}'


FIGURE = re.compile(r'<img\b(?=[^>]*\bclass="[^"]*\bcourse-figure\b)[^>]*?\bsrc="([^"]+)"[^>]*>')


def link_figures(app, pagename, templatename, context, doctree):
    body = context.get("body")
    if body:
        context["body"] = FIGURE.sub(
            lambda m: (f'<a class="course-figure-link" href="{m.group(1)}" '
                       f'title="open the figure at full size">{m.group(0)}</a>'), body)


def language_twin(app, pagename, templatename, context, doctree):
    """Every page names its twin in the other edition (issue 28 §7): the English site is html/, the
    Chinese one html/zh/ (tools/build_site.py), with the same page names. A <link rel="alternate">
    in the head, which course.js turns into the switcher in the page's header."""
    lang = (app.config.html_context or {}).get("course_lang", "en")
    up = "../" * pagename.count("/")
    other, href = ("en", f"{up}../{pagename}.html") if lang == "zh" else ("zh", f"{up}zh/{pagename}.html")
    label = "English" if other == "en" else "中文"
    context["metatags"] = context.get("metatags", "") + (
        f'\n<link rel="alternate" hreflang="{other}" href="{href}" title="{label}" data-course-switch="1">')


def setup(app):
    app.connect("html-page-context", language_twin)
    PygmentsBridge.html_formatter = LineSpanFormatter
    app.add_search_language(SearchChineseRuns)
    app.connect("html-page-context", link_figures)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
