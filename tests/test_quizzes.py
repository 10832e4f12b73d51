"""Self-check questions teach (issue 16 §4): for every quiz of the sixteen chapters,

- its key is salted per question (``qid``, unique in the course) and matches the solution's answer;
- a wrong answer gets a hint that states neither the answer nor the explanation; the explanation
  (``why``) comes only with the right answer, and it is sealed in the cell the learner sees (only
  the right answer opens it), so reading the test cell gives nothing away;
- the right letters are spread: no chapter has the same letter for all its questions, and no letter
  is right in more than 40% of the course's multiple-choice questions;
- in the learner release an unanswered question is ``answer_k = None`` (its check says "Set your
  answer", never NameError).
"""
import ast
import io
import json
import re
from collections import Counter
from contextlib import redirect_stdout
from pathlib import Path

import pytest

from utils.checks import CheckFailure, check_choice, check_number, quiz_key
from utils.checks._quiz import SEALED, open_why

ROOT = Path(__file__).resolve().parents[1]


def _cells(path):
    nb = json.loads(path.read_text())
    return [(c.get("metadata", {}).get("nbgrader", {}).get("grade_id", ""), "".join(c["source"]) if isinstance(c["source"], list) else c["source"], c)
            for c in nb["cells"]]


def _answer(src: str):
    value = None
    for node in ast.parse(src.replace("### BEGIN SOLUTION", "").replace("### END SOLUTION", "")).body:
        if isinstance(node, ast.Assign):
            value = ast.literal_eval(node.value)
    return value


def _call(src: str):
    visible = src.split("### BEGIN HIDDEN TESTS")[0]
    for node in ast.walk(ast.parse(visible)):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) in ("check_choice", "check_number"):
            kw = {k.arg: ast.literal_eval(k.value) for k in node.keywords}
            if node.func.id == "check_choice" and len(node.args) > 1:
                kw["choices"] = ast.literal_eval(node.args[1])
            return node.func.id, kw
    return None, {}


def _quizzes():
    out = []
    for path in sorted(ROOT.glob("solutions/*/*.ipynb")):
        cells = _cells(path)
        answers = {gid: _answer(src) for gid, src, _ in cells if re.fullmatch(r"quiz_\d+", gid)}
        for gid, src, _ in cells:
            if re.fullmatch(r"test_quiz_\d+", gid):
                kind, kw = _call(src)
                out.append((path.parent.name, gid[5:], kind, kw, answers.get(gid[5:])))
    return out


QUIZZES = _quizzes()
IDS = [f"{a}:{q}" for a, q, *_ in QUIZZES]


def test_every_chapter_has_quizzes():
    assert len({a for a, *_ in QUIZZES}) == len(list(ROOT.glob("solutions/*/*.ipynb")))


@pytest.mark.parametrize("assignment,quiz,kind,kw,answer", QUIZZES, ids=IDS)
def test_key_is_salted_and_matches_the_answer(assignment, quiz, kind, kw, answer):
    assert kind in ("check_choice", "check_number"), f"{assignment} {quiz}: no check_choice/check_number call"
    assert kw.get("qid"), f"{assignment} {quiz}: give the question an id (qid=...) that salts its key"
    assert kw.get("hint") and kw.get("why"), f"{assignment} {quiz}: a hint (wrong answer) and a why (right answer)"
    decimals = kw.get("decimals", 2) if kind == "check_number" else None
    assert kw.get("key") == quiz_key(answer, decimals, qid=kw["qid"]), f"{assignment} {quiz}: key does not match the answer"
    assert kw["why"].startswith(SEALED), f"{assignment} {quiz}: seal the why (python tools/seal_quizzes.py)"
    assert open_why(kw["why"], answer, decimals, qid=kw["qid"]), f"{assignment} {quiz}: the why does not open with the answer"


def test_question_ids_are_unique():
    ids = Counter(kw.get("qid") for *_, kw, _ in QUIZZES)
    assert all(n == 1 for n in ids.values()), [q for q, n in ids.items() if n > 1]


def _gives_away(text: str, kind: str, answer, decimals) -> bool:
    t = text.lower()
    if kind == "check_choice":
        a = str(answer).lower()
        return bool(re.search(rf"[\"'(]{a}[\"')]|\b(option|answer|letter|choice) {a}\b", t))
    value = float(answer)
    shown = {f"{value:.{d}f}" for d in range(1, (decimals or 2) + 1)} | {f"{value:g}"}
    return any(s in t for s in shown if s not in ("0.0", "0", "1", "1.0"))


@pytest.mark.parametrize("assignment,quiz,kind,kw,answer", QUIZZES, ids=IDS)
def test_a_wrong_answer_gets_a_hint_never_the_answer(assignment, quiz, kind, kw, answer):
    decimals = kw.get("decimals", 2) if kind == "check_number" else None
    assert not _gives_away(kw["hint"], kind, answer, decimals), f"{assignment} {quiz}: the hint gives the answer away: {kw['hint']}"
    args = {k: kw[k] for k in ("key", "why", "hint", "qid")}
    if kind == "check_choice":
        choices = kw.get("choices", "abcd")
        wrong = [c for c in choices if c != answer]
        right_call = lambda: check_choice(answer, choices, **args)  # noqa: E731
        wrong_calls = [lambda w=w: check_choice(w, choices, **args) for w in wrong]
    else:
        args["decimals"] = decimals
        right_call = lambda: check_number(answer, **args)  # noqa: E731
        wrong_calls = [lambda: check_number(float(answer) + 1.0, **args), lambda: check_number(-float(answer) - 0.5, **args)]
    why = open_why(kw["why"], answer, decimals, qid=kw["qid"])
    with redirect_stdout(io.StringIO()) as out:
        right_call()
    assert "✅" in out.getvalue() and why in out.getvalue()
    for call in wrong_calls:
        with pytest.raises(CheckFailure) as info:
            call()
        msg = str(info.value)
        assert why not in msg and kw["hint"] in msg
    if kind == "check_choice":  # a wrong letter does not open the explanation
        assert all(open_why(kw["why"], w, qid=kw["qid"]) is None for w in wrong)
        assert not _gives_away(msg.replace(kw["hint"], ""), kind, answer, decimals) or kind == "check_number"


def test_right_letters_are_spread():
    letters = [(a, str(ans).lower()) for a, _, kind, _, ans in QUIZZES if kind == "check_choice"]
    per_chapter = {}
    for a, letter in letters:
        per_chapter.setdefault(a, []).append(letter)
    same = [a for a, ls in per_chapter.items() if len(ls) >= 2 and len(set(ls)) == 1]
    assert not same, f"every question has the same right letter in {same}"
    counts = Counter(letter for _, letter in letters)
    assert max(counts.values()) <= 0.4 * len(letters), f"right letters are not spread: {dict(counts)}"


@pytest.mark.parametrize("assignment", sorted({a for a, *_ in QUIZZES}))
def test_release_leaves_unanswered_questions_defined(assignment):
    release = ROOT / "notebooks" / assignment / f"{assignment}.ipynb"
    for gid, src, _ in _cells(release):
        if re.fullmatch(r"quiz_\d+", gid):
            first = next(line for line in src.splitlines() if line.strip() and not line.lstrip().startswith("#"))
            assert re.fullmatch(rf"answer_{gid[5:]}\s*=\s*None\b.*", first), (
                f"{assignment} {gid}: the release's answer cell should start with answer_{gid[5:]} = None, got {first!r}")
            # Setting the answer is all it takes (issue 26 §4): the release's answer cell runs as it is.
            assert "raise" not in src and "NotImplementedError" not in src, (
                f"{assignment} {gid}: the release's answer cell raises; it should only hold answer_{gid[5:]} = None")
            exec(compile(src, f"{assignment} {gid}", "exec"), {})


def _hidden(assignment: str, quiz: str) -> str:
    for gid, src, _ in _cells(ROOT / "solutions" / assignment / f"{assignment}.ipynb"):
        if gid == f"test_{quiz}" and "### BEGIN HIDDEN TESTS" in src:
            return src.split("### BEGIN HIDDEN TESTS")[1].split("### END HIDDEN TESTS")[0]
    return ""


def _probes(kind, kw, answer):
    if kind == "check_choice":
        letters = kw.get("choices", "abcd")
        return [*letters, str(answer).upper(), f" {answer} ", "e"]
    step = 10.0 ** -kw.get("decimals", 2)
    value = float(answer)
    return [answer, value] + [value + f * step for f in (-1.5, -1, -0.6, -0.51, -0.49, -0.3, 0.3, 0.49, 0.51, 0.6, 1, 1.5)]


@pytest.mark.parametrize("assignment,quiz,kind,kw,answer", QUIZZES, ids=IDS)
def test_the_grade_and_the_visible_check_agree_on_every_answer(assignment, quiz, kind, kw, answer):
    """A quiz's hidden test (what nbgrader scores) accepts exactly what its visible check accepts:
    the same rounding of a number to ``decimals`` places, the same letters. Probed at the answer,
    around each rounding boundary and at the other letters (issue 26: a visible ✅ that scored 0,
    and a wrong answer that scored)."""
    hidden = _hidden(assignment, quiz)
    assert hidden.strip(), f"{assignment} {quiz}: no hidden test"
    var = "answer_" + quiz.split("_")[-1]
    args = {k: kw[k] for k in ("key", "why", "hint", "qid")}
    for probe in _probes(kind, kw, answer):
        try:
            with redirect_stdout(io.StringIO()):
                if kind == "check_choice":
                    check_choice(probe, kw.get("choices", "abcd"), **args)
                else:
                    check_number(probe, decimals=kw.get("decimals", 2), **args)
            visible = True
        except CheckFailure:
            visible = False
        try:
            exec(hidden, {var: probe})
            graded = True
        except AssertionError:
            graded = False
        assert visible == graded, (f"{assignment} {quiz}: {var} = {probe!r}: the visible check "
                                   f"{'accepts' if visible else 'rejects'} it, the grade {'scores' if graded else 'does not'}")
