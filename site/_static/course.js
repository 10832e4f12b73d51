/* The course site's own script (issue 27 §4).
   1. The sidebar buttons of the article's header work. pydata-sphinx-theme (0.16+) puts its own
      pair of sidebar buttons in its page header, which sphinx-book-theme hides, and both themes bind
      their click handlers to the FIRST `.primary-toggle` / `.secondary-toggle` of the page: that
      hidden pair. The buttons a reader sees (the article's header) did nothing: below ~1,200 px
      the chapter list and the contents list could not be opened. A click on them is handed to the
      button the themes listen to.
   2. Foldable sections of the chapter pages: a button before each numbered section's heading folds
      the section to its heading; "Fold all" leaves the chapter's outline. Following a link to an
      anchor inside a folded section unfolds it. Without JavaScript every section is open.
   3. The switcher to the other edition (English / 中文) in every page's header. */
(function () {
  function forwardSidebarButtons() {
    for (const cls of ["primary-toggle", "secondary-toggle"]) {
      const bound = document.querySelector("." + cls);
      if (!bound) continue;
      for (const b of document.querySelectorAll(".bd-header-article ." + cls)) {
        if (b === bound) continue;
        b.addEventListener("click", e => {
          e.preventDefault();
          e.stopImmediatePropagation();
          bound.click();
        }, true);
      }
    }
  }

  function sections() {
    return [...document.querySelectorAll("article.bd-article section > h2, article.bd-article section > h3")]
      .map(h => h.parentElement);
  }
  function setFolded(sec, folded) {
    sec.classList.toggle("folded", folded);
    const b = sec.querySelector(":scope > h2 > button.fold-toggle, :scope > h3 > button.fold-toggle");
    if (b) {
      b.setAttribute("aria-expanded", String(!folded));
      b.title = folded ? "unfold this section" : "fold this section";
    }
  }
  function reveal(hash) {
    if (!hash || hash.length < 2) return;
    let el = document.getElementById(decodeURIComponent(hash.slice(1)));
    for (; el; el = el.parentElement) {
      if (el.tagName === "SECTION" && el.classList.contains("folded")) setFolded(el, false);
    }
  }
  // 3. The two editions: the page's twin in the other language (site/_ext/course_site.py puts it in
  //    the head as <link rel="alternate" data-course-switch>) becomes a button in the header.
  function languageSwitch() {
    const link = document.querySelector("link[data-course-switch]");
    if (!link || document.querySelector("a.lang-switch")) return;
    const a = document.createElement("a");
    a.className = "lang-switch";
    a.href = link.getAttribute("href");
    a.hreflang = link.getAttribute("hreflang");
    a.lang = a.hreflang;
    a.textContent = link.title;
    a.title = a.hreflang === "zh" ? "这一页的中文版" : "This page in English";
    const item = document.createElement("div");
    item.className = "header-article-item";
    item.appendChild(a);
    const place = document.querySelector(".bd-header-article .header-article-items__end")
      || document.querySelector(".bd-header-article .header-article__inner");
    if (place) place.insertBefore(item, place.firstChild);
    else document.body.insertBefore(item, document.body.firstChild);
  }
  function init() {
    languageSwitch();
    forwardSidebarButtons();
    const secs = sections();
    if (!secs.length || !document.querySelector(".run-chapter")) return;  // chapter pages only
    for (const sec of secs) {
      const h = sec.querySelector(":scope > h2, :scope > h3");
      const b = document.createElement("button");
      b.type = "button";
      b.className = "fold-toggle";
      b.setAttribute("aria-label", "fold or unfold this section");
      if (sec.id) b.setAttribute("aria-controls", sec.id);
      b.addEventListener("click", e => { e.preventDefault(); setFolded(sec, !sec.classList.contains("folded")); });
      h.insertBefore(b, h.firstChild);
      setFolded(sec, false);
    }
    const bar = document.createElement("div");
    bar.className = "fold-all";
    const zh = document.documentElement.lang.startsWith("zh");
    for (const [label, folded] of [[zh ? "全部折叠（Fold all sections）" : "Fold all sections", true],
                                   [zh ? "全部展开（Unfold all）" : "Unfold all", false]]) {
      const b = document.createElement("button");
      b.type = "button";
      b.textContent = label;
      b.addEventListener("click", () => {
        // Folding all folds the numbered sections; their subsections open with them.
        for (const s of sections()) setFolded(s, folded && s.querySelector(":scope > h2") !== null);
      });
      bar.appendChild(b);
    }
    const box = document.querySelector(".run-chapter");
    box.parentNode.insertBefore(bar, box.nextSibling);
    reveal(location.hash);
    window.addEventListener("hashchange", () => reveal(location.hash));
    document.addEventListener("click", e => {
      const a = e.target.closest && e.target.closest("a[href^='#']");
      if (a) reveal(a.getAttribute("href"));
    }, true);
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", init);
  else init();
})();
