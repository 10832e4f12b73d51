"""Nothing is answered before it is asked (issue 26 §1).

* A hand-graded derivation's model answer and marking scheme live only in its solution cell (the
  instructor's version; the release replaces the cell with "YOUR ANSWER HERE"). No sentence and no
  display equation of it may appear in any learner release, except a display equation that the
  prompt gives as the statement to prove ("Show that ...").
* No self-check answer appears in its chapter's release outside its own question: a number asked
  for (or the number of the right option) stated in a sentence about the same thing, or the right
  option's words in the prose just above the question.
The website is built from the releases for every exercise and derivation: ``tests/test_site.py``
runs :func:`leaks` on its pages too.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ASSIGNMENTS = sorted(p.name for p in (ROOT / "solutions").iterdir() if (p / f"{p.name}.ipynb").exists())

_STOP = set("""about above after again against because before being below between both could does doing
during each every first from further have having here itself just more most other over same should
since some such than that their them then there these they this those through under until very what
when where which while with would your yours into only also always never often shown which whose
answer question following option options true false give gives given""".split())


def _src(cell) -> str:
    s = cell.get("source", "")
    return "".join(s) if isinstance(s, list) else s


def _nbg(cell) -> dict:
    return cell.get("metadata", {}).get("nbgrader", {}) or {}


def _outputs_text(cell) -> str:
    parts = []
    for out in cell.get("outputs", []):
        if out.get("output_type") == "stream":
            parts.append(_src({"source": out.get("text", "")}))
        for mime in ("text/plain", "text/markdown", "text/html"):
            if mime in out.get("data", {}):
                parts.append(_src({"source": out["data"][mime]}))
    return "\n".join(parts)


def _norm(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip().lower()


def _display_equations(md: str) -> list:
    """Display equations and inline formulas ($...$) of a markdown text, normalised."""
    display = re.findall(r"\$\$(.+?)\$\$", md, flags=re.S)
    inline = re.findall(r"(?<!\$)\$([^$\n]+?)\$(?!\$)", re.sub(r"\$\$.+?\$\$", " ", md, flags=re.S))
    return [_norm(m) for m in display + inline]


def _sentences(md: str) -> list:
    """The prose sentences of a markdown text (display equations removed), normalised."""
    text = re.sub(r"\$\$.+?\$\$", " ", md, flags=re.S)
    text = re.sub(r"^\s*(#+|[-*]|\d+\.)\s*", "", text, flags=re.M)
    parts = re.split(r"(?<=[.!?:;])\s+|\n+", text)
    return [_norm(p) for p in parts if p.strip()]


def _words(text: str) -> set:
    return {w for w in re.findall(r"[a-z]{5,}", text.lower()) if w not in _STOP}


def _load(path: Path) -> dict:
    return json.loads(path.read_text())


def model_answers(assignment: str) -> list:
    """(grade_id, sentences, display equations) of every hand-graded derivation's solution cell."""
    nb = _load(ROOT / "solutions" / assignment / f"{assignment}.ipynb")
    found = []
    for cell in nb["cells"]:
        meta = _nbg(cell)
        if cell["cell_type"] == "markdown" and meta.get("solution") and meta.get("grade"):
            md = _src(cell)
            sentences = [s for s in _sentences(md) if len(re.findall(r"[a-z]{2,}", s)) >= 8]
            found.append((meta.get("grade_id"), sentences, [e for e in _display_equations(md) if len(e.replace(" ", "")) >= 16]))
    return found


def _statement_equations(md: str) -> set:
    """Display equations a prompt gives as the statement to prove (within a sentence that asks to
    show, prove or derive them)."""
    allowed = set()
    for m in re.finditer(r"\$\$(.+?)\$\$|(?<!\$)\$([^$\n]+?)\$(?!\$)", md, flags=re.S):
        before = md[max(0, m.start() - 300):m.start()].lower()
        tail = re.split(r"(?<=[.!?])\s", before)[-1]
        if re.search(r"\b(show|prove|derive|verify|check)\b", tail):
            allowed.add(_norm(m.group(1) or m.group(2)))
    return allowed


# Formulas a model answer shares with what the chapter teaches before the task, checked by hand:
# (derivation, formula as normalised here, why it is not the answer).
VOCABULARY = [
    ("derivation_nadaraya_watson", r"\frac{1}{\sqrt{2\pi}}", "the Gaussian kernel's constant, part of its definition"),
    # The task counts the cost of the two orders; the reordering itself is section 2.3's subject.
    ("derivation_associativity", r"\varphi(q)\varphi(k)^\top", "section 2.3's notation"),
    ("derivation_associativity", r"\varphi(k)^\top v", "section 2.3's notation"),
    ("derivation_associativity", r"\varphi(q)(\varphi(k)^\top v)", "section 2.3's reordering"),
    ("derivation_associativity", r"(\varphi(q)\varphi(k)^\top)v = \varphi(q)(\varphi(k)^\top v)", "section 2.3's reordering"),
]


def leaks(assignment: str, texts: list, gids=None) -> list:
    """Every model-answer sentence or equation of ``assignment`` found in ``texts`` (cells of the
    release, or a website page), as messages. ``gids``: only these derivations (default: all).
    A formula that is part of a statement to prove ("Show that ...") is not a leak."""
    found = []
    blob = _norm("\n".join(texts))
    allowed = set().union(*(_statement_equations(t) for t in texts)) if texts else set()
    for gid, sentences, equations in model_answers(assignment):
        if gids is not None and gid not in gids:
            continue
        for s in sentences:
            if s in blob:
                found.append(f"{gid}: a sentence of the model answer is in the release: {s[:120]!r}")
        for e in equations:
            if e in blob and not any(e in a for a in allowed) and (gid, e) not in {(g, f) for g, f, _ in VOCABULARY}:
                found.append(f"{gid}: an equation of the model answer is in the release: $${e[:100]}$$")
    return found


def _release_cells(assignment: str) -> list:
    return _load(ROOT / "notebooks" / assignment / f"{assignment}.ipynb")["cells"]


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_no_model_answer_in_the_release(assignment):
    """No sentence of a model answer anywhere in the release; no formula of it before its own
    answer cell (later sections may use what the learner has derived by then)."""
    cells = _release_cells(assignment)
    texts = [_src(c) + "\n" + _outputs_text(c) for c in cells]
    problems = []
    for gid, sentences, _ in model_answers(assignment):
        where = next((i for i, c in enumerate(cells) if _nbg(c).get("grade_id") == gid), len(cells))
        problems += [p for p in leaks(assignment, texts, {gid}) if "a sentence" in p]
        problems += [p for p in leaks(assignment, texts[:where], {gid}) if "an equation" in p]
    assert not problems, "\n".join(problems)


def test_every_derivation_has_its_marking_scheme_only_in_the_instructors_version():
    """The rubric is the first part of the derivation's solution cell; the prompt above it states
    what to prove and how the points split, never "a complete answer"."""
    problems = []
    for assignment in ASSIGNMENTS:
        cells = _load(ROOT / "solutions" / assignment / f"{assignment}.ipynb")["cells"]
        for i, cell in enumerate(cells):
            meta = _nbg(cell)
            if not (cell["cell_type"] == "markdown" and meta.get("solution") and meta.get("grade")):
                continue
            if "marking scheme" not in _src(cell).lower():
                problems.append(f"{assignment} {meta['grade_id']}: no 'Marking scheme' in the solution cell")
            prompt = _src(cells[i - 1]).lower()
            for phrase in ("marking scheme", "a complete answer", "model answer"):
                if phrase in prompt:
                    problems.append(f"{assignment} {meta['grade_id']}: the prompt (cell {i - 1}) shows {phrase!r}")
    assert not problems, "\n".join(problems)


def quiz_answers(assignment: str) -> list:
    """(k, answer literal, the question's text) for every self-check question, from the solutions."""
    nb = _load(ROOT / "solutions" / assignment / f"{assignment}.ipynb")
    cells = nb["cells"]
    found = []
    for i, cell in enumerate(cells):
        gid = _nbg(cell).get("grade_id", "")
        if not re.fullmatch(r"quiz_\d+", gid):
            continue
        k = gid[5:]
        m = re.search(rf"###\s*BEGIN SOLUTION\s*\n\s*answer_{k}\s*=\s*(.+?)\s*\n", _src(cell))
        question = _src(cells[i - 1]) if i and cells[i - 1]["cell_type"] == "markdown" else ""
        found.append((k, m.group(1).strip() if m else None, question))
    return found


def _question_part(question_cell: str, k: str) -> str:
    """The question itself: from "**Question k" to the end of the cell (a summary may share it)."""
    m = re.search(rf"\*\*Question {k}\b", question_cell)
    return question_cell[m.start():] if m else question_cell


def _option_text(question: str, letter: str) -> str:
    m = re.search(rf"^\s*[-*]?\s*\(?{letter}\)\s*(.+)$", question, flags=re.M)
    return m.group(1).strip() if m else ""


# Sentences that state a question's number about something else, checked by hand:
# (chapter, question, words of the sentence).
ALLOWED = [
    # Question 2 asks for the MiB of a (1, 1024, 1024, 128) tensor (512); these "S = 512" are lengths.
    ("02_additive_attention", "2", "additive attention builds a `(b, s_q, s_k, a)` tensor"),
    ("02_additive_attention", "2", "at $s = 512$ additive attention needs about"),
]


def allowed(assignment: str, k: str, sentence: str) -> bool:
    return any(a == assignment and q == k and words in _norm(sentence) for a, q, words in ALLOWED)

_NUMBER = re.compile(r"(?<![\w.])\d+(?:\.\d+)?(?![\w.])")


def answer_leaks(assignment: str) -> list:
    cells = _release_cells(assignment)
    problems = []
    for k, literal, question_cell in quiz_answers(assignment):
        if literal is None:
            continue
        question = _question_part(question_cell, k)
        value = literal.strip("\"'")
        if re.fullmatch(r"[a-e]", value):  # a letter: the right option's number, or its words just above
            option = _option_text(question, value)
            bare = re.sub(r"[\s$]", "", option)
            numbers = [bare] if re.fullmatch(r"\d+(?:\.\d+)?", bare) else []  # an option that is a number
        else:
            option, numbers = "", _NUMBER.findall(value)
        numbers = [n for n in numbers if len(n.replace(".", "").lstrip("0")) >= 2]  # 0-9 are everywhere
        where = next((i for i, c in enumerate(cells) if question and question in _src(c)), len(cells))
        context = _words(question) - _words(option)
        for i, cell in enumerate(cells):
            own = _src(cell)
            outside = own.replace(question, " ") if question and question in own else own
            if re.fullmatch(rf"(test_)?quiz_{k}", _nbg(cell).get("grade_id", "")):
                continue
            text = outside + "\n" + _outputs_text(cell)
            for sentence in re.split(r"(?<=[.!?])\s+|\n+", text):
                shared = _words(sentence) & context
                near = where - 3 <= i <= where  # the summary right above the question
                if (any(re.search(rf"(?<![\w.]){re.escape(n)}(?![\w.])", sentence) for n in numbers)
                        and len(shared) >= (2 if near else 3) and not allowed(assignment, k, sentence)):
                    problems.append(f"question {k}: its answer ({value}: {numbers}) is stated in cell {i}: "
                                    f"{sentence.strip()[:160]!r} (shares {sorted(shared)[:4]})")
            if option and len(option.split()) >= 4 and _norm(option) in _norm(outside) and where - 3 <= i <= where:
                problems.append(f"question {k}: the right option's words are in cell {i}, just above it: {option[:100]!r}")
    return problems


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_no_self_check_answer_before_its_question(assignment):
    problems = answer_leaks(assignment)
    assert not problems, "\n".join(problems)
