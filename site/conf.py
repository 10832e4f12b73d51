"""Sphinx configuration of the course's website (built by `make site`, i.e. tools/build_site.py).

Plain Sphinx + myst-nb + sphinx-book-theme. The build reads the site notebooks that
tools/build_site.py writes into build/site/src (stored outputs, never executed) and needs no
network: MathJax 2 is Debian's libjs-mathjax copied into _static, and no page loads a script,
style sheet or font from another host (tests/test_site.py checks the built HTML and a browser run).
"""
import logging
import os
import sys

logging.getLogger("jieba").setLevel(logging.WARNING)  # no "Building prefix dict…" lines in the build's output

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "_ext"))

project = "Attention, from scratch and autograded"
author = "The attention course"
copyright = "the attention course's authors"
html_title = "Attention, from scratch"

extensions = ["myst_nb", "course_site"]  # course_site: _ext/course_site.py (wrapped code lines, figure links)
exclude_patterns = ["_build", "_release/**", "_extra/**", "_ext/**", "**.ipynb_checkpoints"]
# The learner notebooks, copied next to their chapter pages (chapters/NN_name.ipynb) for download.
html_extra_path = ["_extra"]
master_doc = "index"
language = "en"
# The search: the pages mix English and Chinese. Sphinx's Chinese search segments Chinese text with
# jieba (requirements.txt) and indexes English words with the Porter stemmer as the English search
# does. `dict: ""`: jieba's own dictionary, not loaded a second time as a user dictionary (5 s).
html_search_language = "zh"
html_search_options = {"dict": ""}
try:
    import jieba  # noqa: F401  (without it Sphinx's zh search silently indexes no Chinese word)
except ImportError as exc:
    raise ImportError("the site's Chinese search needs jieba (requirements.txt): "
                      ".venv/bin/pip install 'jieba>=0.42.1'") from exc

# Stored outputs of the executed solution notebooks are the content: nothing is executed.
nb_execution_mode = "off"
nb_merge_streams = True
# No widget manager from a CDN (the build drops widget views; tqdm bars keep their text form).
nb_ipywidgets_js = {}
myst_enable_extensions = ["dollarmath", "amsmath"]
myst_heading_anchors = 3
suppress_warnings = ["myst.header", "mystnb.unknown_mime_type"]

html_theme = "sphinx_book_theme"
html_static_path = ["_static"]
html_css_files = ["course.css"]
html_js_files = ["course.js"]  # foldable sections
html_show_sourcelink = True
html_copy_source = True
html_last_updated_fmt = None
html_favicon = "_static/favicon.svg"
# The theme's colour mode: without it pydata-sphinx-theme logs "Got invalid theme mode" on every page.
html_context = {"default_mode": "light"}
html_theme_options = {
    "show_toc_level": 3,
    "home_page_in_toc": True,
    "use_download_button": False,
    "use_fullscreen_button": False,
    "show_navbar_depth": 1,
    "navigation_with_keys": False,
    # The button that opens the chapter's contents list where the window is too narrow to show it
    # beside the text (below ~1,200 px); the theme's other header buttons (download, full screen,
    # launch) stay off.
    "article_header_end": ["toggle-secondary-sidebar.html"],
}

# MathJax 2 from the local copy (Debian's libjs-mathjax), configured for Sphinx's \( \) / \[ \] spans.
mathjax_path = "mathjax/MathJax.js?config=TeX-AMS_CHTML"
mathjax2_config = {
    "tex2jax": {
        "inlineMath": [["\\(", "\\)"]],
        "displayMath": [["\\[", "\\]"]],
        "processEscapes": True,
        "processClass": "math|output_area",
        "ignoreClass": "tex2jax_ignore|mathjax_ignore|document",
    },
    "HTML-CSS": {"availableFonts": ["TeX"], "imageFont": None},
    "CommonHTML": {"linebreaks": {"automatic": False}},
    "showMathMenu": False,
    "messageStyle": "none",
}
mathjax3_config = None
