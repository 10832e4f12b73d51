"""The course's website (`make site`, tools/build_site.py): built from the repository alone, with no
solution, hidden test or quiz answer in it, and read in a real browser.

One build per test run (module fixture; SITE_DIR=<folder with html/> reuses a build of this run),
then one headless Chromium (Debian's `chromium`) driven over its DevTools protocol opens every
page in one session: no console error, every image loaded, every formula typeset by the local
MathJax, the Chinese of every heading drawn with a CJK font (the fonts Chromium really used,
CSS.getPlatformFontsForNode), every internal link and anchor resolves. Screenshots of the landing
page and of chapter 03 go to reports/site/. Without Chromium the browser test is skipped with a
loud reason (the set-up installs it with apt where it can).
"""
from __future__ import annotations

import base64
import functools
import html as html_lib
import http.server
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = sorted(p.name for p in (ROOT / "solutions").iterdir() if (p / f"{p.name}.ipynb").exists())
SHOTS = ROOT / "reports" / "site"
BUILD_BUDGET_S = 120  # the budget for all sixteen chapters on 2 cores
CJK = re.compile(r"[\u3000-\u303f\u4e00-\u9fff\uff00-\uffef]")


# ------------------------------------------------------------------------------------------ build
@pytest.fixture(scope="module")
def site():
    reuse = os.environ.get("SITE_DIR")
    if reuse:
        out = Path(reuse)
        assert (out / "html" / "index.html").exists(), f"SITE_DIR={reuse} has no html/index.html"
        yield out
        return
    tmp = Path(tempfile.mkdtemp(prefix="site-"))
    out = tmp / "site"
    t0, r0 = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
    res = subprocess.run([sys.executable, str(ROOT / "tools" / "build_site.py"), "--out", str(out)],
                         cwd=ROOT, capture_output=True, text=True)
    wall, r1 = time.perf_counter() - t0, resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    assert res.returncode == 0, f"site build failed:\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}"
    print(f"\nsite build: {wall:.1f} s wall, {cpu:.1f} s CPU\n{res.stdout}")
    out.joinpath("build_s.json").write_text(json.dumps({"wall_s": wall, "cpu_s": cpu}))
    yield out
    shutil.rmtree(tmp, ignore_errors=True)


def test_build_is_fast_and_has_every_chapter(site):
    html = site / "html"
    for name in CHAPTERS:
        assert (html / "chapters" / f"{name}.html").exists(), f"no page for {name}"
        assert (html / "_downloads").exists()
    # The budget is for 2 cores: the build's CPU time (user + sys of every process it ran) bounds its
    # wall time on an otherwise idle 2-core machine, and does not grow when other tests share the CPUs.
    times = site / "build_s.json"
    if times.exists():
        t = json.loads(times.read_text())
        assert t["cpu_s"] < BUILD_BUDGET_S, f"the site build used {t['cpu_s']:.0f} s of CPU ({t['wall_s']:.0f} s wall)"
    assert len(CHAPTERS) == 16


# ------------------------------------------------------------------------------- no secrets
SOL_BLOCK = re.compile(r"^[ \t]*### BEGIN SOLUTION[^\n]*\n(.*?)^[ \t]*### END SOLUTION", re.S | re.M)
HIDDEN_BLOCK = re.compile(r"^[ \t]*### BEGIN HIDDEN TESTS[^\n]*\n(.*?)^[ \t]*### END HIDDEN TESTS", re.S | re.M)
QUIZ_ANSWER = re.compile(r"""^\s*(answer_\w+\s*=\s*["'][^"']+["'])""", re.M)
MD_SYMBOLS = re.compile(r"[*_`$\\{}()\[\]|^~#>]+")


def _ws(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def _plain(text: str) -> str:
    return _ws(MD_SYMBOLS.sub(" ", text))


@functools.lru_cache(maxsize=1)
def _secrets():
    """(kind, chapter, text) of every non-trivial secret line, and the public corpus."""
    secrets, public, own = [], [], {}
    for name in CHAPTERS:
        sol = nbformat.read(ROOT / "solutions" / name / f"{name}.ipynb", as_version=4)
        rel_path = ROOT / "notebooks" / name / f"{name}.ipynb"
        if rel_path.exists():
            public += [c.source for c in nbformat.read(rel_path, as_version=4).cells]
            own[name] = _ws("\n".join(c.source for c in nbformat.read(rel_path, as_version=4).cells))
        for cell in sol.cells:
            meta = cell.metadata.get("nbgrader") or {}
            if not meta.get("grade_id"):
                public.append(cell.source)
                continue
            if cell.cell_type == "markdown" and meta.get("solution"):
                secrets += [("derivation", name, line) for line in cell.source.splitlines()]
                continue
            for block in SOL_BLOCK.findall(cell.source):
                secrets += [("solution", name, line) for line in block.splitlines()]
            for block in HIDDEN_BLOCK.findall(cell.source):
                secrets += [("hidden test", name, line) for line in block.splitlines()]
            secrets += [("quiz answer", name, m) for m in QUIZ_ANSWER.findall(cell.source)
                        if not re.search(r"=\s*None", m)]
    public_ws = _ws("\n".join(public))
    public_plain = _plain("\n".join(public))
    kept = []
    for kind, name, line in secrets:
        text = line.strip()
        if kind == "derivation":
            plain = _plain(text)
            if len(plain) >= 24 and plain not in public_plain:
                kept.append((kind, name, plain, True))
        elif kind == "quiz answer":
            # `answer_1 = "a"` is also the format example other chapters print: a quiz answer is
            # looked for in its own chapter's files (and files of no chapter), and is public only
            # if that chapter's release itself shows the line.
            if _ws(text) not in own.get(name, ""):
                kept.append((kind, name, _ws(text), False))
        elif len(text) >= 10 and not text.startswith("#"):
            if _ws(text) not in public_ws:
                kept.append((kind, name, _ws(text), False))
    return tuple(kept)


BINARY_KEYS = {"image/png", "image/jpeg", "image/gif", "application/pdf"}


def _texts(path: Path):
    """The text forms a secret could take in one built file."""
    raw = path.read_text(errors="replace")
    forms = [raw]
    if path.suffix in (".html", ".htm"):
        forms.append(html_lib.unescape(re.sub(r"<[^>]+>", "", raw)))
    if path.suffix in (".ipynb", ".json", ".txt", ".js"):
        try:
            data = json.loads(raw)
        except ValueError:
            data = None
        if data is not None:
            strings = []

            def walk(x):
                if isinstance(x, str):
                    strings.append(x)
                elif isinstance(x, dict):
                    for k, v in x.items():
                        if k not in BINARY_KEYS:  # base64 figures: no text to leak, and most of the bytes
                            walk(v)
                elif isinstance(x, list):
                    if x and all(isinstance(s, str) for s in x):
                        strings.append("".join(x))  # notebook sources are lists of lines
                    for v in x:
                        walk(v)
            walk(data)
            forms = ["\n".join(strings)]  # every string of the JSON, decoded (the raw form only escapes them)
    return forms


def _scan(folder: Path, secrets):
    leaks = []
    for path in sorted(folder.rglob("*")):
        rel = path.relative_to(folder)
        if not path.is_file() or path.suffix not in (".html", ".js", ".json", ".ipynb", ".txt", ".md"):
            continue
        if rel.parts[:2] in (("_static", "mathjax"), ("html", "_static")) and "mathjax" in rel.parts:
            continue
        forms = _texts(path)
        ws = [_ws(f) for f in forms]
        plain = [_plain(f) for f in forms]
        of = [c for c in CHAPTERS if c in str(rel)]
        for kind, name, needle, is_plain in secrets:
            if kind == "quiz answer" and of and name not in of:
                continue
            hay = plain if is_plain else ws
            if any(needle in h for h in hay):
                leaks.append(f"{rel}: {kind} of {name}: {needle[:90]!r}")
    return leaks


def test_no_solution_hidden_test_or_quiz_answer_reaches_the_site(site):
    secrets = _secrets()
    kinds = {(k, n) for k, n, _, _ in secrets}
    # The collection itself works: every chapter has solution lines and quiz answers to look for.
    for name in CHAPTERS:
        assert ("solution", name) in kinds, f"no solution line collected for {name}"
        assert ("quiz answer", name) in kinds, f"no quiz answer collected for {name}"
    assert any(k == "derivation" for k, _ in kinds) and any(k == "hidden test" for k, _ in kinds)
    # Everything built: the site (pages, _sources, _downloads, search index) and the site notebooks.
    leaks = _scan(site, secrets)
    assert not leaks, f"{len(leaks)} secret lines reach the site:\n" + "\n".join(leaks[:40])


def test_the_scan_finds_a_planted_leak(tmp_path):
    secrets = _secrets()
    code = next(s for s in secrets if s[0] == "solution" and len(s[2]) > 20)
    quiz = next(s for s in secrets if s[0] == "quiz answer")
    deriv = next(s for s in secrets if s[0] == "derivation")
    # As Pygments and MathJax-ready HTML would write them: split into spans, entities escaped.
    spans = "".join(f'<span class="n">{html_lib.escape(ch)}</span>' for ch in code[2])
    (tmp_path / "page.html").write_text(f"<pre>{spans}</pre><p>{html_lib.escape(deriv[2])}</p>")
    (tmp_path / "nb.ipynb.txt").write_text(json.dumps({"cells": [{"source": [quiz[2] + "\n"]}]}))
    leaks = _scan(tmp_path, [code, quiz, deriv])
    assert len(leaks) == 3, leaks
    # And the solution notebook itself, as an .ipynb, leaks every kind.
    name = "03_scaled_dot_product_attention"
    shutil.copy2(ROOT / "solutions" / name / f"{name}.ipynb", tmp_path / "sol.ipynb")
    (tmp_path / "page.html").unlink()
    (tmp_path / "nb.ipynb.txt").unlink()
    found = {line.split(": ")[1].split(" of ")[0] for line in _scan(tmp_path, [s for s in secrets if s[1] == name])}
    assert found == {"solution", "hidden test", "quiz answer", "derivation"} - ({"hidden test"} if not any(
        s[0] == "hidden test" and s[1] == name for s in secrets) else set()), found


# ------------------------------------------------------------------------- static structure
def test_pages_load_nothing_from_other_hosts(site):
    html = site / "html"
    bad = []
    for page in html.rglob("*.html"):
        text = page.read_text()
        for m in re.finditer(r"<(script|link|img|iframe|source|video|audio)\b[^>]*?\b(src|href)=\"(https?:)?//[^\"]+\"", text):
            bad.append(f"{page.relative_to(html)}: {m.group(0)[:120]}")
        for m in re.finditer(r"@import\s+url\(['\"]?https?://", text):
            bad.append(f"{page.relative_to(html)}: {m.group(0)}")
    for css in (html / "_static").rglob("*.css"):
        for m in re.finditer(r"url\(['\"]?https?://[^)]+\)|@import\s+['\"]https?://[^'\"]+", css.read_text(errors="replace")):
            bad.append(f"{css.relative_to(html)}: {m.group(0)[:120]}")
    assert not bad, "\n".join(bad)
    assert (html / "_static" / "mathjax" / "MathJax.js").exists()


def test_navigation_and_links_to_the_notebooks(site):
    html = site / "html"
    index = (html / "index.html").read_text()
    index_text = html_lib.unescape(re.sub(r"<[^>]+>", "", index))
    for needle in ("Colab", "JupyterHub", "make lab", "For"):
        assert needle in index_text, f"landing page lacks {needle!r}"
    for name in CHAPTERS:
        assert f'href="chapters/{name}.html"' in index, f"landing page has no link to {name}"
        page = (html / "chapters" / f"{name}.html").read_text()
        assert re.search(r'href="[^"]*_downloads/[^"]+/' + re.escape(name) + r'\.ipynb"', page), f"{name}: no notebook download"
        assert f"notebooks/{name}/{name}.ipynb" in page, f"{name}: no link to the release on the repository"
        i = CHAPTERS.index(name)
        nav = {m.group(1): m.group(2) for m in re.finditer(r'<a class="(left-prev|right-next)"\s+href="([^"]+)"', page)}
        want = {}
        if i > 0:
            want["left-prev"] = f"{CHAPTERS[i - 1]}.html"
        want["right-next"] = f"{CHAPTERS[i + 1]}.html" if i < len(CHAPTERS) - 1 else nav.get("right-next")
        if i == 0:
            want["left-prev"] = "../index.html"
        assert {k: nav.get(k) for k in want} == want, f"{name}: previous/next are {nav}"
        assert "bd-toc-nav" in page or "page-toc" in page, f"{name}: no table of contents"
        h2 = re.findall(r"<h2>(.*?)<a class=\"headerlink\"", page)
        assert h2 and sum(bool(CJK.search(h)) for h in h2) >= len(h2) // 2, f"{name}: headings lost their Chinese terms: {h2}"
        # Exercises are shown as released: the stubs are there.
        assert "NotImplementedError" in page or "YOUR ANSWER HERE" in page or "answer_1" in page, f"{name}: no exercise"


# ---------------------------------------------------------------------------------- browser
def _chromium() -> str | None:
    for exe in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(exe)
        if path:
            return path
    return None


class _CDP:
    """A minimal DevTools-protocol client for one page (websocket-client)."""

    def __init__(self, ws_url):
        import websocket
        self.ws = websocket.create_connection(ws_url, timeout=60, suppress_origin=True, max_size=None) \
            if "max_size" in websocket.create_connection.__code__.co_varnames else \
            websocket.create_connection(ws_url, timeout=60, suppress_origin=True)
        self.next_id = 0
        self.events = []

    def call(self, method, **params):
        self.next_id += 1
        my = self.next_id
        self.ws.send(json.dumps({"id": my, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == my:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})
            if "method" in msg:
                self.events.append(msg)

    def wait_event(self, method, timeout=60):
        deadline = time.time() + timeout
        for i, ev in enumerate(self.events):
            if ev["method"] == method:
                return self.events.pop(i)
        while time.time() < deadline:
            msg = json.loads(self.ws.recv())
            if msg.get("method") == method:
                return msg
            if "method" in msg:
                self.events.append(msg)
        raise TimeoutError(method)


PAGE_SCRIPT = r"""
(async () => {
  if (window.MathJax && MathJax.Hub && MathJax.Hub.Queue) {
    await new Promise(r => MathJax.Hub.Queue(r));
  }
  await document.fonts.ready;
  const imgs = [...document.images].map(i => ({src: i.currentSrc || i.src, ok: i.complete && i.naturalWidth > 0}));
  const maths = [...document.querySelectorAll('.math')];
  const untypeset = maths.filter(m => !m.querySelector('.mjx-chtml, .MathJax_CHTML') || m.querySelector('.MathJax_Error, .mjx-merror'))
                         .map(m => m.textContent.slice(0, 80));
  const main = (document.querySelector('main') || document.body).cloneNode(true);
  main.querySelectorAll('script, style, pre, code, .highlight, .MJX_Assistive_MathML, .mjx-chtml, .MathJax_CHTML, textarea').forEach(e => e.remove());
  const text = main.textContent;
  const raw = text.match(/\\\(|\\\[|\$\$|\$[^\s$][^$\n]{0,200}?\$/g) || [];
  let cjk = 0;
  document.querySelectorAll('h1, h2, h3, h4').forEach(h => {
    // Only headings the page draws (the theme keeps hidden copies of some titles).
    if (h.getClientRects().length && /[\u4e00-\u9fff]/.test(h.textContent)) { h.setAttribute('data-cjk', String(cjk++)); }
  });
  return JSON.stringify({
    imgs, nmath: maths.length, untypeset, raw,
    links: [...document.querySelectorAll('a[href]')].map(a => a.href),
    ids: [...document.querySelectorAll('[id]')].map(e => e.id).concat([...document.querySelectorAll('a[name]')].map(a => a.name)),
    title: document.title,
  });
})()
"""


@pytest.fixture(scope="module")
def browser_report(site):
    exe = _chromium()
    if exe is None:
        msg = ("CHROMIUM IS MISSING: the website was NOT tested in a browser (console errors, images, "
               "MathJax, CJK glyphs, links). Install Debian's `chromium` (make test does it as root with apt).")
        print("\n" + "!" * 100 + "\n" + msg + "\n" + "!" * 100, file=sys.stderr)
        pytest.skip(msg)
    html = site / "html"
    handler = functools.partial(_QuietHandler, directory=str(html))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}/"
    profile = Path(tempfile.mkdtemp(prefix="chromium-"))
    proc = subprocess.Popen(
        [exe, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
         "--no-first-run", "--no-default-browser-check", "--disable-extensions",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--remote-debugging-port=0", "--remote-allow-origins=*", f"--user-data-dir={profile}",
         "--window-size=1280,900", "about:blank"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    report = {"pages": {}, "shots": [], "base": base}
    try:
        port_file = profile / "DevToolsActivePort"
        deadline = time.time() + 60
        while not port_file.exists() or not port_file.read_text().strip():
            assert proc.poll() is None, "chromium exited at start"
            assert time.time() < deadline, "chromium did not open its DevTools port in 60 s"
            time.sleep(0.2)
        port = int(port_file.read_text().split()[0])
        import urllib.request
        targets = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=30).read())
        page_ws = next(t["webSocketDebuggerUrl"] for t in targets if t["type"] == "page")
        cdp = _CDP(page_ws)
        for domain in ("Page", "Runtime", "Log", "DOM", "CSS"):
            cdp.call(f"{domain}.enable")
        cdp.call("Emulation.setDeviceMetricsOverride", width=1280, height=900, deviceScaleFactor=1, mobile=False)
        cjk_families = _cjk_families()
        pages = sorted(str(p.relative_to(html)) for p in html.rglob("*.html")
                       if p.relative_to(html).parts[0] not in ("_static", "_sources", "_downloads"))
        only = [x for x in os.environ.get("SITE_PAGES", "").split(",") if x]  # for debugging
        pages = [p for p in pages if not only or p in only]
        SHOTS.mkdir(parents=True, exist_ok=True)
        for rel in pages:
            cdp.events.clear()
            cdp.call("Page.navigate", url=base + rel)
            cdp.wait_event("Page.loadEventFired")
            res = cdp.call("Runtime.evaluate", expression=PAGE_SCRIPT, awaitPromise=True, returnByValue=True, timeout=60000)
            assert "exceptionDetails" not in res, f"{rel}: page script failed: {res['exceptionDetails']}"
            data = json.loads(res["result"]["value"])
            errors = []
            for ev in cdp.events:
                m, p = ev["method"], ev.get("params", {})
                if m == "Runtime.exceptionThrown":
                    errors.append(p["exceptionDetails"].get("exception", {}).get("description") or p["exceptionDetails"].get("text"))
                elif m == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
                    errors.append(" ".join(str(a.get("value", a.get("description", ""))) for a in p.get("args", [])))
                elif m == "Log.entryAdded" and p["entry"]["level"] == "error":
                    errors.append(f"{p['entry'].get('text')} {p['entry'].get('url', '')}")
            data["errors"] = errors
            # The fonts Chromium really drew each Chinese heading with.
            root = cdp.call("DOM.getDocument", depth=0)["root"]["nodeId"]
            fonts = []
            for node in cdp.call("DOM.querySelectorAll", nodeId=root, selector="[data-cjk]")["nodeIds"]:
                used = cdp.call("CSS.getPlatformFontsForNode", nodeId=node)["fonts"]
                text = cdp.call("DOM.getOuterHTML", nodeId=node)["outerHTML"]
                text = html_lib.unescape(re.sub(r"<[^>]+>", "", text))
                need = len(CJK.findall(text))
                got = sum(f["glyphCount"] for f in used if f["familyName"] in cjk_families)
                fonts.append({"text": text.strip()[:80], "cjk_chars": need, "cjk_glyphs": got,
                              "fonts": [(f["familyName"], f["glyphCount"]) for f in used]})
            data["cjk_headings"] = fonts
            report["pages"][rel] = data
            if rel == "index.html" or rel.startswith("chapters/03_"):
                shot = cdp.call("Page.captureScreenshot", format="png")["data"]
                dest = SHOTS / ("landing.png" if rel == "index.html" else "chapter_03.png")
                dest.write_bytes(base64.b64decode(shot))
                report["shots"].append(dest)
        cdp.ws.close()
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
        server.shutdown()
        shutil.rmtree(profile, ignore_errors=True)
    (SHOTS / "browser_report.json").write_text(json.dumps(report, indent=1, ensure_ascii=False, default=str))
    report["html"] = html
    return report


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@functools.lru_cache(maxsize=1)
def _cjk_families() -> frozenset:
    out = subprocess.run(["fc-list", ":lang=zh", "family"], capture_output=True, text=True).stdout
    fams = set()
    for line in out.splitlines():
        fams.update(f.strip() for f in line.split(","))
    assert fams, "no font with Chinese glyphs is installed (Debian: fonts-noto-cjk)"
    return frozenset(fams)


def test_every_page_loads_without_console_errors(browser_report):
    pages = browser_report["pages"]
    assert len([p for p in pages if p.startswith("chapters/")]) == len(CHAPTERS)
    bad = {p: d["errors"] for p, d in pages.items() if d["errors"]}
    assert not bad, json.dumps(bad, indent=1)[:4000]


def test_every_image_loads(browser_report):
    bad = {p: [i["src"] for i in d["imgs"] if not i["ok"]] for p, d in browser_report["pages"].items()}
    bad = {p: v for p, v in bad.items() if v}
    assert not bad, bad
    n = sum(len(d["imgs"]) for p, d in browser_report["pages"].items() if p.startswith("chapters/"))
    assert n >= 50, f"only {n} images on the chapter pages: the stored figures are missing"


def test_every_formula_is_typeset(browser_report):
    pages = browser_report["pages"]
    bad = {p: {"untypeset": d["untypeset"][:5], "raw": d["raw"][:5]} for p, d in pages.items() if d["untypeset"] or d["raw"]}
    assert not bad, json.dumps(bad, indent=1, ensure_ascii=False)[:4000]
    assert sum(d["nmath"] for d in pages.values()) > 200, "hardly any formula found: is MathJax math rendered at all?"


def test_chinese_headings_render_with_real_glyphs(browser_report):
    bad, n = [], 0
    for p, d in browser_report["pages"].items():
        for h in d["cjk_headings"]:
            n += 1
            if h["cjk_glyphs"] < h["cjk_chars"]:
                bad.append((p, h))
    assert n >= 16 * 4, f"only {n} headings with Chinese terms found"
    assert not bad, json.dumps(bad[:10], indent=1, ensure_ascii=False)


def test_internal_links_resolve(browser_report):
    html, base = browser_report["html"], browser_report["base"]
    pages = browser_report["pages"]
    bad, n = [], 0
    for p, d in pages.items():
        for href in d["links"]:
            if not href.startswith(base):
                continue
            n += 1
            url = urllib.parse.urlsplit(href)
            path = urllib.parse.unquote(url.path[len(urllib.parse.urlsplit(base).path):])
            target = html / path
            if path == "" or path.endswith("/"):
                target = target / "index.html"
            if not target.exists():
                bad.append(f"{p}: {href} (no file)")
                continue
            rel = str(target.relative_to(html))
            if url.fragment and rel in pages and urllib.parse.unquote(url.fragment) not in pages[rel]["ids"]:
                bad.append(f"{p}: {href} (no anchor)")
    assert n > 100
    assert not bad, "\n".join(bad[:40])


def test_screenshots_written(browser_report):
    shots = browser_report["shots"]
    assert len(shots) == 2, shots
    for s in shots:
        assert s.stat().st_size > 20_000, f"{s} looks empty"
