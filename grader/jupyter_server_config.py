"""Jupyter server configuration of the course (found through JUPYTER_CONFIG_PATH=grader, set by the
Makefile): MathJax is served by the course's own server at /static/mathjax/ (Debian's
libjs-mathjax in /usr/share/javascript, installed by the set-up), so formgrader's submission pages
typeset formulas without a network (see grader/jupyter/nbconvert/templates/base/mathjax.html.j2).
(/usr/share/javascript holds only Debian's JavaScript libraries: none of its names is one of the
server's own static files.)"""
from pathlib import Path

c = get_config()  # noqa: F821 (provided by traitlets)

JAVASCRIPT = Path("/usr/share/javascript")
if (JAVASCRIPT / "mathjax" / "MathJax.js").exists():
    c.ServerApp.extra_static_paths = [str(JAVASCRIPT)]
