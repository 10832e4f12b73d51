"""The outside examiner's review of a chapter, as a file that `make test` holds to the chapter.

Every chapter has ``reviews/NN_name.md``, written by an examiner who did not write the chapter
(``../shared/REVIEW.md``). It lists

* every **numeric sentence** of the chapter's prose (a sentence that quotes a measured-looking
  number: a decimal, a percentage, a ratio such as "2.4×" or "30 times", a number in e-notation)
  and the cell that prints or asserts it;
* every **figure** (a code cell whose stored output is an image) with one line on what it shows;
* the **answers** the examiner wrote (correct ones written another way, realistic mistakes, a
  rule-breaking one) and the check's verdict on each;
* the **findings** and what was done about them;

and records the hash of the chapter's prose and figure cells it reviewed. ``tests/test_reviews.py``
fails when the prose or a figure cell changes after that hash (review the change, then ``stamp``),
when a numeric sentence or a figure is missing from the file, or when a row is left unfilled.

    python tools/review.py skeleton NN_name   # write/refresh the tables (filled rows are kept)
    python tools/review.py check NN_name      # what the test would say
    python tools/review.py stamp NN_name      # record the current hash (after reviewing the changes)
    python tools/review.py hash NN_name
"""
from __future__ import annotations

import hashlib
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REVIEWS = ROOT / "reviews"
STAMP = re.compile(r"<!-- review: chapter=(\S+) hash=([0-9a-f]{16,64}) -->")
_NUMERIC = re.compile(r"(?<![\w.])(\d+\.\d+|\d+(\.\d+)?\s?%|\d+(\.\d+)?\s?(×|x\b|times\b|-fold\b|fold\b)|\d(\.\d+)?e[-+]?\d+)", re.I)
FILL = "…"  # an unfilled cell of a table


def _src(cell) -> str:
    s = cell.get("source", "")
    return "".join(s) if isinstance(s, list) else s


def notebook(assignment: str) -> dict:
    return json.loads((ROOT / "solutions" / assignment / f"{assignment}.ipynb").read_text())


def has_figure(cell) -> bool:
    return cell["cell_type"] == "code" and any("image/png" in o.get("data", {}) for o in cell.get("outputs", []))


def chapter_hash(assignment: str) -> str:
    """The hash of what a review vouches for: every markdown cell and every figure cell's code."""
    h = hashlib.sha256()
    for i, cell in enumerate(notebook(assignment)["cells"]):
        if cell["cell_type"] == "markdown" or has_figure(cell):
            h.update(f"{i}\0{cell['cell_type']}\0{_src(cell)}\0".encode())
    return h.hexdigest()[:32]


def _plain(text: str) -> str:
    text = re.sub(r"<[^>]+>", " ", text)
    return re.sub(r"\s+", " ", text).strip()


def _claims(text: str) -> str:
    """The text without what holds numbers but states no measurement: code spans, section and
    chapter references, a table cell that is only a section number."""
    text = re.sub(r"`[^`]*`", " ", text)
    text = re.sub(r"(section|sections|§|chapter|chapters)\s+\d+(\.\d+)*(\s*(–|-|and|,)\s*\d+(\.\d+)*)*", " ", text, flags=re.I)
    text = re.sub(r"\|\s*\d+(\.\d+)*\s*(?=\|)", "| ", text)
    return text


def numeric_sentences(assignment: str) -> list:
    """(cell index, sentence) for every numeric sentence of the chapter's markdown."""
    found = []
    for i, cell in enumerate(notebook(assignment)["cells"]):
        if cell["cell_type"] != "markdown":
            continue
        for line in _src(cell).splitlines():
            if line.lstrip().startswith("#"):
                continue  # headings: "### 2.1 ..."
            for sentence in re.split(r"(?<=[.!?])\s+(?=[A-Z(*$`])", line):
                plain = _plain(sentence)
                if _NUMERIC.search(_claims(plain)):
                    found.append((i, plain))
    return found


def figures(assignment: str) -> list:
    """(cell index, the cell's first line) for every figure cell."""
    found = []
    for i, cell in enumerate(notebook(assignment)["cells"]):
        if has_figure(cell):
            lines = [ln for ln in _src(cell).splitlines() if ln.strip() and not ln.startswith(("%%", "#"))]
            found.append((i, lines[0][:80] if lines else ""))
    return found


def excerpt(sentence: str, n: int = 90) -> str:
    s = sentence.replace("|", "\\|")
    return s if len(s) <= n else s[:n - 1] + "…"


def _rows(text: str, heading: str) -> list:
    """The rows (lists of cells) of the table under ``## heading``."""
    m = re.search(rf"^## {re.escape(heading)}\s*$(.*?)(?=^## |\Z)", text, flags=re.M | re.S)
    if not m:
        return []
    rows = []
    for line in m.group(1).splitlines():
        if line.startswith("|") and not re.match(r"^\|\s*-", line):
            cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
            rows.append(cells)
    return rows[1:]  # without the header


def skeleton(assignment: str) -> str:
    """The review file with every numeric sentence and figure listed; rows already filled in an
    existing file are kept (matched by cell and excerpt)."""
    path = REVIEWS / f"{assignment}.md"
    old = path.read_text() if path.exists() else ""
    # a filled cell that holds an unescaped "|" was split there: keep all of it, the bar escaped
    filled = {(r[0], r[1]): " \\| ".join(r[2:]) for r in _rows(old, "Numeric sentences") if len(r) >= 3}
    described = {r[0]: " \\| ".join(r[2:]) for r in _rows(old, "Figures") if len(r) >= 3}
    head, _, _ = old.partition("\n## Numeric sentences")
    if not head.strip():
        head = (f"# Review of {assignment}\n\n<!-- review: chapter={assignment} hash={'0' * 32} -->\n\n"
                "Examiner: (who, when, which commit). Brief: ../shared/REVIEW.md.\n")
    lines = [head.rstrip(), "", "## Numeric sentences", "",
             "| cell | sentence | printed or asserted in |", "|---|---|---|"]
    for i, sentence in numeric_sentences(assignment):
        key = (str(i), excerpt(sentence))
        lines.append(f"| {i} | {excerpt(sentence)} | {filled.get(key, FILL)} |")
    lines += ["", "## Figures", "", "| cell | code | what it shows |", "|---|---|---|"]
    for i, first in figures(assignment):
        lines.append(f"| {i} | `{excerpt(first, 60)}` | {described.get(str(i), FILL)} |")
    rest = old.partition("\n## Answers the examiner wrote")[2]
    lines += ["", "## Answers the examiner wrote" + (rest.rstrip() if rest else
              "\n\n| exercise | answer | kind | the check's verdict | right? |\n|---|---|---|---|---|\n\n"
              "## Findings\n\n(What the examiner found, ranked, and what was done about each.)")]
    return "\n".join(lines) + "\n"


def problems(assignment: str) -> list:
    path = REVIEWS / f"{assignment}.md"
    if not path.exists():
        return [f"{assignment}: no review file (reviews/{assignment}.md): python tools/review.py skeleton {assignment}"]
    text = path.read_text()
    found = []
    m = STAMP.search(text)
    if not m or m.group(1) != assignment:
        found.append(f"{assignment}: the review has no stamp for this chapter")
    elif m.group(2) != chapter_hash(assignment):
        found.append(f"{assignment}: the chapter's prose or figures changed since its review (hash {m.group(2)}, now "
                     f"{chapter_hash(assignment)}): review the changes, then python tools/review.py stamp {assignment}")
    listed = {(r[0], r[1]): r[2] for r in _rows(text, "Numeric sentences") if len(r) >= 3}
    for i, sentence in numeric_sentences(assignment):
        where = listed.get((str(i), excerpt(sentence)))
        if where is None:
            found.append(f"{assignment}: numeric sentence of cell {i} not in the review: {excerpt(sentence, 70)!r}")
        elif not where or where == FILL:
            found.append(f"{assignment}: cell {i}: which cell prints or asserts {excerpt(sentence, 50)!r}?")
    shown = {r[0]: r[2] for r in _rows(text, "Figures") if len(r) >= 3}
    for i, _ in figures(assignment):
        what = shown.get(str(i))
        if not what or what == FILL:
            found.append(f"{assignment}: figure of cell {i} not described in the review")
    answers = _rows(text, "Answers the examiner wrote")
    if len([r for r in answers if any(c and c != FILL for c in r)]) < 3:
        found.append(f"{assignment}: fewer than three answers written by the examiner are listed")
    return found


def stamp(assignment: str) -> None:
    path = REVIEWS / f"{assignment}.md"
    text = path.read_text()
    new = f"<!-- review: chapter={assignment} hash={chapter_hash(assignment)} -->"
    text = STAMP.sub(new, text) if STAMP.search(text) else text.replace("\n", f"\n\n{new}\n", 1)
    path.write_text(text)


def main(argv: list) -> int:
    if len(argv) != 2 or argv[0] not in ("skeleton", "check", "stamp", "hash"):
        print(__doc__)
        return 2
    cmd, assignment = argv
    if cmd == "hash":
        print(chapter_hash(assignment))
    elif cmd == "skeleton":
        REVIEWS.mkdir(exist_ok=True)
        (REVIEWS / f"{assignment}.md").write_text(skeleton(assignment))
        print(f"wrote reviews/{assignment}.md")
    elif cmd == "stamp":
        stamp(assignment)
        print(f"stamped reviews/{assignment}.md with {chapter_hash(assignment)}")
    else:
        found = problems(assignment)
        try:
            print("\n".join(found) or f"{assignment}: the review is complete and current")
        except BrokenPipeError:
            pass
        return 1 if found else 0
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
