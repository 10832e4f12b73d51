"""Build the course's website: `make site` (or `python tools/build_site.py`).

1. Preprocess: per chapter, a *site notebook* is made from two notebooks of the repository:
   - the executed SOLUTION notebook gives the prose, the math and the course's own demo cells with
     their stored outputs (figures, tables, printed measurements);
   - the learner RELEASE (notebooks/) gives every nbgrader cell (exercise stubs, check cells, quiz
     answer cells, derivation answer cells) exactly as released, with its outputs cleared.
   A solution cell that is not an nbgrader cell but holds a solution or hidden-test block stops the
   build (it would leak). `%%needs` and `# NBVAL_IGNORE_OUTPUT` first lines are stripped for
   reading. The set-up cell (cell id `setup`) is left out: the site is read, not run. Outputs are
   the course's reference run, and the page says so at its top; what only makes sense live is
   dropped: widgets (a tqdm bar's widget and its frozen "0%" text form, `interactive(...)` reprs),
   tqdm's text bars, and the lines "✅ this section uses your X" (the reader wrote nothing). Each
   figure gets an alt text (the figure's title in the cell's code, else the cell's first comment,
   else the section's heading) and the class `course-figure` (site/_ext/course_site.py links it
   to the full-size PNG). Each chapter starts with a box to run it: Colab (URL built from
   pyproject.toml's repository address) and a download of the learner notebook, which the site
   copies next to the page (chapters/NN_name.ipynb).
2. The landing page: the README's introduction, the chapter table (titles from the notebooks) and
   how to run the course (the README's own sections, so the two never disagree).
3. Sphinx (myst-nb, sphinx-book-theme) builds HTML with execution off, MathJax served locally.

Everything is written under build/site/ (ignored by git): src/ (the Sphinx project), html/ (the site).
Prints where the time goes (preprocess, copy of MathJax, Sphinx read/write).
"""
from __future__ import annotations

import argparse
import copy
import json
import os
import re
import shutil
import subprocess
import sys
import time
import tomllib
from html import escape as html_escape
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
SITE_CONF = ROOT / "site"
DEFAULT_OUT = ROOT / "build" / "site"
MATHJAX_DIRS = [Path("/usr/share/javascript/mathjax"), Path("/usr/share/mathjax")]

SECRET_MARKERS = ("### BEGIN SOLUTION", "### END SOLUTION", "### BEGIN HIDDEN TESTS", "### END HIDDEN TESTS")
STRIP_FIRST_LINES = ("%%needs", "# NBVAL_IGNORE_OUTPUT")
WIDGET_MIME = "application/vnd.jupyter.widget-view+json"
SETUP_ID = "setup"  # the cell id of every chapter's set-up cell (tools/setup_cell.py)


# The two editions (issue 28 §7): the English site at html/, the Chinese one at html/zh/, each page
# linked to its twin (site/_ext/course_site.py: <link rel="alternate" hreflang>, course.js: the
# switcher in every page's header). The Chinese pages come from the Chinese edition's notebooks,
# generated from the same source by `make release` (tools/i18n.py): same code, same outputs.
EDITIONS = {
    "en": {"solutions": ROOT / "solutions", "release": ROOT / "notebooks", "readme": ROOT / "README.md",
           "sphinx_language": "en", "html": ""},
    "zh": {"solutions": ROOT / "i18n" / "zh" / "solutions", "release": ROOT / "notebooks" / "zh",
           "readme": ROOT / "README.zh.md", "sphinx_language": "zh_CN", "html": "zh"},
}


def repository_url() -> str | None:
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    urls = data.get("project", {}).get("urls", {})
    return urls.get("Repository") or urls.get("Homepage")


def chapters() -> list[str]:
    return sorted(p.name for p in (ROOT / "solutions").iterdir()
                  if p.is_dir() and (p / f"{p.name}.ipynb").exists())


def grade_id(cell) -> str | None:
    return (cell.get("metadata", {}).get("nbgrader") or {}).get("grade_id")


def strip_markers(source: str) -> str:
    lines = source.split("\n")
    while lines and lines[0].strip().startswith(STRIP_FIRST_LINES):
        lines.pop(0)
    return "\n".join(lines)


def separate_display_math(source: str) -> str:
    """Blank lines around `$$ ... $$` blocks. Jupyter renders `$$x$$` glued to the next line of
    text, but MyST's dollarmath then reads the `$$` as inline math and pairs every later `$` wrongly
    (raw `$...$` left on the page). The text itself is unchanged."""
    lines, out, i = source.split("\n"), [], 0
    while i < len(lines):
        line = lines[i]
        if line.strip().startswith("$$"):
            j = i
            if not (len(line.strip()) > 2 and line.strip().endswith("$$")):
                j = i + 1
                while j < len(lines) and not lines[j].strip().endswith("$$"):
                    j += 1
                j = min(j, len(lines) - 1)
            indent = line[: len(line) - len(line.lstrip())]
            if out and out[-1].strip():
                out.append(indent)
            out.extend(lines[i:j + 1])
            if j + 1 < len(lines) and lines[j + 1].strip():
                out.append(indent)
            i = j + 1
            continue
        out.append(line)
        i += 1
    return "\n".join(out)


# A tqdm bar in text form: "training:  37%|███▋      | 74/200 [00:01<00:02, 61.2it/s]".
TQDM_LINE = re.compile(r"\d+%\|[^|\n]*\|\s*[\d.]+[kMG]?/[\d.?]+[kMG]?\s*\[")
# Printed by the course's demo cells after the reader's function passed its check: on the site no
# reader wrote anything (utils/ prints it; see tests/test_site.py, which counts them in the sources).
YOURS_LINE = re.compile(r"^\s*✅ this section uses your\b")


def clean_text(text: str) -> str:
    lines = re.split(r"(?<=\n)", text)
    kept = []
    for line in lines:
        last = line.split("\r")[-1]  # a carriage return overwrites the line on a terminal
        if TQDM_LINE.search(line) or YOURS_LINE.match(last):
            continue
        kept.append(line)
    return "".join(kept)


def clean_outputs(outputs):
    """The outputs of one demo cell as the site shows them (see the module's docstring)."""
    kept = []
    for out in outputs:
        out = copy.deepcopy(out)
        data = out.get("data")
        if data is not None and WIDGET_MIME in data:
            continue  # a widget: its text form is a frozen tqdm bar or `interactive(children=...)`
        if out.get("output_type") == "stream":
            out["text"] = clean_text(out["text"])
            if not out["text"].strip():
                continue
        elif data is not None and set(data) == {"text/plain"}:
            data["text/plain"] = clean_text(data["text/plain"])
            if not data["text/plain"].strip():
                continue
        kept.append(out)
    return kept


FIGURE_TITLE = re.compile(r"""\b(?:suptitle|set_title|title)\s*[=(]\s*(f?)(["'])(.+?)\2""")


def figure_alt(source: str, heading: str) -> str:
    """An alt text for the figures a cell draws: the title its code gives the figure, else its first
    comment, else the heading of its section."""
    m = FIGURE_TITLE.search(source)
    if m:
        text = m.group(3)
        if m.group(1):
            text = re.sub(r"\{[^{}]*\}", "…", text)
        return "Figure: " + text.replace("\\n", " ").strip()
    for line in source.splitlines():
        s = line.strip()
        if s.startswith("#") and not s.startswith(("#!", "# NBVAL", "# noqa", "#%%")):
            return "Figure: " + s.lstrip("# ").strip()
    return f"Figure of the section “{heading}”" if heading else "Figure"


def run_box(name: str, repo: str | None, lang: str = "en") -> str:
    """The box under a chapter's title: run it, and where its outputs come from (raw HTML)."""
    zh = lang == "zh"
    download = "⬇ 下载笔记本" if zh else "⬇ Download the notebook"
    buttons = [f'<a class="run-button primary" href="{name}.ipynb" download>{download}</a>']
    colab_note = ""
    if repo and repo.startswith("https://github.com/"):
        path = f"notebooks/{'zh/' if zh else ''}{name}/{name}.ipynb"
        colab = f"https://colab.research.google.com/github/{repo.removeprefix('https://github.com/')}/blob/main/{path}"
        buttons.append(f'<a class="run-button" href="{colab}">▶ {"在 Colab 中打开" if zh else "Open in Colab"}</a>')
        colab_note = (f' Colab 按钮打开的是<a href="{repo}/blob/main/{path}">位于 {html_escape(repo)} 的笔记本</a>：'
                      '课程在那里发布之后它才能用。' if zh else
                      f' The Colab button opens <a href="{repo}/blob/main/{path}">the notebook at '
                      f'{html_escape(repo)}</a>: it works once the course is published there.')
    if zh:
        return "\n".join([
            '<div class="run-chapter admonition note">',
            '<p class="admonition-title">运行本章（Run this chapter）</p>',
            '<div class="run-buttons">' + " ".join(buttons) + "</div>",
            '<p>这个页面供阅读；要做练习，请在 Jupyter 中运行笔记本（下载它；见首页的<a href="../index.html">如何运行</a>），'
            '或者在 Colab 中运行。' + colab_note + "</p>",
            "<p><strong>本页的每一个输出都来自课程的参考运行</strong>（它的解答笔记本，在构建课程时执行），"
            "而不是来自你的代码：输出中说“your”或“yours”的地方，指的是课程的解答。练习、检查和自测题"
            "按学习者拿到的样子展示，不带解答。</p>",
            "</div>",
        ])
    return "\n".join([
        '<div class="run-chapter admonition note">',
        '<p class="admonition-title">Run this chapter（运行本章）</p>',
        '<div class="run-buttons">' + " ".join(buttons) + "</div>",
        '<p>This page is for reading; to do the exercises, run the notebook in Jupyter (download it; '
        'see <a href="../index.html#how-to-run-it">how to run it</a>) or in Colab.' + colab_note + "</p>",
        "<p><strong>Every output on this page comes from the course's reference run</strong> (its "
        "solution notebook, executed when the course was built), not from your code: where an output "
        "says “your” or “yours”, it is the course's solution. The exercises, checks and self-check "
        "questions are shown as learners get them, without their solutions.</p>",
        "</div>",
    ])


def site_notebook(name: str, repo: str | None, lang: str = "en"):
    """The site notebook of one chapter (see the module's docstring), in edition ``lang``."""
    ed = EDITIONS[lang]
    sol = nbformat.read(ed["solutions"] / name / f"{name}.ipynb", as_version=4)
    rel_path = ed["release"] / name / f"{name}.ipynb"
    if not rel_path.exists():
        raise SystemExit(f"{rel_path} is missing: the site shows exercises from the learner release "
                         f"(python -m grader release {name})")
    rel = nbformat.read(rel_path, as_version=4)
    released = {grade_id(c): c for c in rel.cells if grade_id(c)}
    cells, missing = [], []
    heading = ""
    for cell in sol.cells:
        gid = grade_id(cell)
        if cell.get("id") == SETUP_ID:
            continue  # the set-up cell: the site is read, not run
        if cell.cell_type == "markdown":
            for line in cell.source.splitlines():
                if re.match(r"#{1,4} ", line):
                    heading = line.lstrip("#").strip()
        if gid:
            if gid not in released:
                missing.append(gid)
                continue
            new = copy.deepcopy(released[gid])
            if any(m in new.source for m in SECRET_MARKERS):
                raise SystemExit(f"{rel_path}: released cell {gid!r} still holds a solution or hidden-test block")
            if new.cell_type == "code":
                new.outputs = []
                new.execution_count = None
            else:
                new.source = separate_display_math(new.source)
            new.metadata.setdefault("tags", [])
            cells.append(new)
            continue
        if any(m in cell.source for m in SECRET_MARKERS):
            raise SystemExit(f"solutions/{name}: a cell without nbgrader metadata holds a solution "
                             f"or hidden-test block (it would reach the site): {cell.source[:80]!r}")
        new = copy.deepcopy(cell)
        if new.cell_type == "code":
            new.source = strip_markers(new.source)
            new.outputs = clean_outputs(new.outputs)
            if any("image/png" in o.get("data", {}) for o in new.outputs):
                new.metadata["mystnb"] = {"image": {"alt": figure_alt(new.source, heading),
                                                    "classes": "course-figure"}}
        elif new.cell_type == "markdown":
            new.source = separate_display_math(new.source)
        cells.append(new)
    if missing:
        print(f"  warning: {name}: cells {missing} are not in the release (left out of the site); "
              f"regenerate it with `python -m grader release {name}`", file=sys.stderr)
    # The box goes right under the chapter's title: the first cell is split after its `# ` line.
    first = cells[0]
    if first.cell_type == "markdown" and first.source.startswith("# ") and "\n" in first.source.strip():
        title, rest = first.source.split("\n", 1)
        first.source = title
        cells.insert(1, nbformat.v4.new_markdown_cell(rest.strip("\n"), id="site-intro"))
    cells.insert(1, nbformat.v4.new_markdown_cell(run_box(name, repo, lang), id="site-run"))
    nb = nbformat.v4.new_notebook()
    nb.metadata = {k: v for k, v in sol.metadata.items() if k in ("kernelspec", "language_info")}
    nb.cells = cells
    seen = set()
    for i, c in enumerate(nb.cells):
        c.get("metadata", {}).pop("nbgrader", None)
        if not c.get("id") or c["id"] in seen:
            c["id"] = f"site-{i}"
        seen.add(c["id"])
    return nb, rel_path


def title_of(nb) -> str:
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            for line in cell.source.splitlines():
                if line.startswith("# "):
                    return line[2:].strip()
    return "?"


def readme_sections(repo: str | None, lang: str = "en") -> dict[str, str]:
    """The README (README.zh.md for the Chinese edition) split by `## ` headings ('' is the
    introduction), relative links made absolute."""
    text = EDITIONS[lang]["readme"].read_text(encoding="utf-8")
    parts, key = {"": []}, ""
    for line in text.splitlines():
        if line.startswith("# ") and key == "":
            continue
        if line.startswith("## "):
            key = line[3:].strip()
            parts[key] = []
            continue
        parts[key].append(line)

    def absolute(m):
        target = m.group(2)
        if re.match(r"^[a-z]+:|^#", target) or not repo:
            return m.group(0)
        return f"[{m.group(1)}]({repo}/blob/main/{target.lstrip('./')})"

    return {k: re.sub(r"\[([^\]]+)\]\(([^)\s]+)\)", absolute, "\n".join(v)).strip() for k, v in parts.items()}


def what_you_build(readme_text: str) -> dict[str, str]:
    rows = {}
    for line in readme_text.splitlines():
        m = re.match(r"^\|\s*(\d\d)\s*\|[^|]*\|(.*)\|\s*$", line)
        if m:
            rows[m.group(1)] = m.group(2).strip()
    return rows


def landing_page_zh(titles: dict[str, str], repo: str | None) -> str:
    """The Chinese edition's landing page, from README.zh.md as the English one is from README.md."""
    sec = readme_sections(repo, "zh")
    build = what_you_build(sec.get("各章内容", ""))
    rows = "\n".join(f"| {name[:2]} | [{titles[name]}](chapters/{name}.ipynb) | {build.get(name[:2], '')} |"
                     for name in titles)
    out = [
        "# 从零实现注意力机制，并自动评分（Attention, from scratch and autograded）",
        "",
        sec.get("", ""),
        "",
        "## 各章（The chapters）",
        "",
        "每一章都是一个笔记本：动机、数学（含要你写出的推导）、每个练习下面都有检查、可视化、测量和自测。"
        "在这个网站上，你读到的是课程的解答运行之后留下的样子：图、表和打印出的测量结果；练习、检查和自测题"
        "按学习者拿到的样子展示，不带解答。",
        "",
        "| # | 章节 | 你要实现的 |",
        "|---|---|---|",
        rows,
        "",
        "## 如何运行（How to run it）",
        "",
        "### 本地（Locally）",
        "",
        sec.get("两条命令", ""),
        "",
        "### 不用仓库获取课程",
        "",
        sec.get("不用仓库获取课程", ""),
        "",
        f"仓库：<{repo}>。" if repo else "",
        "",
        "```{toctree}", ":hidden:", ":maxdepth: 1", ":caption: 章节", "",
        *[f"chapters/{name}" for name in titles], "```", "",
    ]
    return "\n".join(out)


def landing_page(titles: dict[str, str], repo: str | None) -> str:
    sec = readme_sections(repo)
    build = what_you_build(sec.get("Chapters", ""))
    rows = "\n".join(
        f"| {name[:2]} | [{titles[name]}](chapters/{name}.ipynb) | {build.get(name[:2], '')} |"
        for name in titles)
    run = [sec[k] for k in sec if k.startswith("Two commands")]
    other = [(k, sec[k]) for k in sec if k.startswith("Other ways to run it")]
    repo_line = f"The repository: <{repo}>." if repo else ""
    out = [
        "# Attention, from scratch and autograded（从零实现注意力）",
        "",
        sec.get("", ""),
        "",
        "## The chapters（章节）",
        "",
        "Each chapter is a notebook: motivation, the math (with derivations to write), exercises "
        "with a check under each, visualizations, measurements, and a self-check. On this site you "
        "read the chapter as the course's solution run left it: its figures, tables and printed "
        "measurements; the exercises, checks and self-check questions are shown as the learner "
        "gets them, without their solutions.",
        "",
        "| # | chapter | what you build |",
        "|---|---|---|",
        rows,
        "",
        "## How to run it（如何运行）",
        "",
        "### Locally（本地）",
        "",
        *run,
        "",
    ]
    for key, body in other:
        out += [f"### {key}", "", body.replace("\n- **", "\n- **"), ""]
    out += [repo_line, "", "```{toctree}", ":hidden:", ":maxdepth: 1", ":caption: Chapters", "",
            *[f"chapters/{name}" for name in titles], "```", ""]
    return "\n".join(out)


def copy_mathjax(static: Path) -> str:
    for src in MATHJAX_DIRS:
        if (src / "MathJax.js").exists():
            break
    else:
        raise SystemExit("MathJax 2 not found: install Debian's libjs-mathjax (make site does it as root)")
    dst = static / "mathjax"
    dst.mkdir(parents=True)
    shutil.copy2(src / "MathJax.js", dst / "MathJax.js")
    (dst / "config").mkdir()
    shutil.copy2(src / "config" / "TeX-AMS_CHTML.js", dst / "config" / "TeX-AMS_CHTML.js")
    for sub in ("extensions", "jax/input/TeX", "jax/element", "jax/output/CommonHTML"):
        shutil.copytree(src / sub, dst / sub, symlinks=False)
    fonts = src / "fonts" / "HTML-CSS" / "TeX"
    if fonts.exists():
        shutil.copytree(fonts, dst / "fonts" / "HTML-CSS" / "TeX",
                        ignore=shutil.ignore_patterns("svg", "eot", "png"))
    return str(src)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help="build folder (default build/site)")
    ap.add_argument("--jobs", default="auto", help="sphinx-build -j (default auto)")
    args = ap.parse_args(argv)
    out = args.out.resolve()
    src, html = out / "src", out / "html"
    times = {}
    t0 = time.perf_counter()
    shutil.rmtree(out, ignore_errors=True)
    repo = repository_url()
    for lang, ed in EDITIONS.items():
        t_ed = time.perf_counter()
        esrc = src if lang == "en" else out / f"src-{lang}"
        ehtml = html / ed["html"] if ed["html"] else html
        (esrc / "chapters").mkdir(parents=True)
        (esrc / "_extra" / "chapters").mkdir(parents=True)
        titles = {}
        for name in chapters():
            nb, rel_path = site_notebook(name, repo, lang)
            nbformat.write(nb, esrc / "chapters" / f"{name}.ipynb")
            shutil.copy2(rel_path, esrc / "_extra" / "chapters" / f"{name}.ipynb")  # next to its page
            titles[name] = title_of(nb)
        (esrc / "index.md").write_text(landing_page(titles, repo) if lang == "en" else landing_page_zh(titles, repo),
                                       encoding="utf-8")
        shutil.copy2(SITE_CONF / "conf.py", esrc / "conf.py")
        shutil.copytree(SITE_CONF / "_static", esrc / "_static")
        shutil.copytree(SITE_CONF / "_ext", esrc / "_ext", ignore=shutil.ignore_patterns("__pycache__"))
        times[f"{lang}: preprocess (16 site notebooks, landing page)"] = time.perf_counter() - t_ed
        t1 = time.perf_counter()
        mj = copy_mathjax(esrc / "_static")
        times[f"{lang}: copy MathJax 2 from {mj}"] = time.perf_counter() - t1
        t2 = time.perf_counter()
        cmd = [sys.executable, "-m", "sphinx", "-b", "html", "-q", "-j", str(args.jobs),
               "-D", f"language={ed['sphinx_language']}", "-A", f"course_lang={lang}",
               "-d", str(out / f"doctrees-{lang}"), str(esrc), str(ehtml)]
        res = subprocess.run(cmd, cwd=out)
        times[f"{lang}: sphinx-build (read + write HTML)"] = time.perf_counter() - t2
        if res.returncode:
            print(f"sphinx-build failed ({lang})", file=sys.stderr)
            return res.returncode
    (out / "timings.json").write_text(json.dumps(times, indent=1))
    total = time.perf_counter() - t0
    for k, v in times.items():
        print(f"  {v:6.1f} s  {k}")
    print(f"site built in {total:.1f} s: {html}/index.html  "
          f"(serve it: python -m http.server -d {os.path.relpath(html, ROOT)} 8000)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
