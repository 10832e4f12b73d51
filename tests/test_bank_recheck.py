"""The samples the graded bank leaves out, and every chapter's learner release, judged by the
re-check alone.

``tests/test_grader.py`` grades every chapter-03 sample and, in every other chapter, the correct
answers, the first mistakes submission and the attacks, through the whole pipeline (kernel,
re-check, nbgrader). The other mistakes submissions (``bank.recheck_only()``) and the sixteen
releases (a learner who submits the stubs) come here. The re-check is the grade of every code
exercise (a test cell the kernel failed but the re-check passes earns its points, and the reverse
loses them), and the self-check questions are graded from the answers alone, so here:

* every code exercise's re-check verdict, and every question's verdict, gives the sample's
  expected score (a release: zero everywhere);
* the visible check, run in-process on the learner's definitions the way the notebook's check cell
  runs it, agrees with the re-check (issue 16 §3): no ✅ in the notebook for a 0 in the grade.

A sandboxed re-check costs about a third of a whole grading (no kernel, no nbgrader). Marked slow.
"""
from __future__ import annotations

import contextlib
import io
from concurrent import futures

import pytest

from grader import course, verify
from grader.restore import restore
from grader.samples import bank
from utils.checks import EXERCISES, CheckFailure
from utils.checks._core import run_check

pytestmark = pytest.mark.slow


def _subjects() -> list:
    """(student, assignment, submission, expected {gid: points} or None for a release)."""
    out = [(s, bank.ASSIGNMENT_OF.get(s, bank.A), bank.SAMPLES[s][1](), bank.SAMPLES[s][2]) for s in bank.recheck_only()]
    out += [(f"release_{a}", a, course.load_json(course.release_path(a)), None) for a in course.assignments()]
    return out


@pytest.fixture(scope="module")
def rechecked(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("recheck")

    def one(subject):
        student, assignment, submission, expected = subject
        release = course.load_json(course.release_path(assignment))
        solution = course.load_json(course.source_path(assignment))
        nb = restore(release, submission).notebook
        host = tmp / student
        host.mkdir()
        verdicts = verify.verify(nb, student, assignment, host_dir=host)
        quizzes = verify.check_quizzes(nb, solution)
        return student, (assignment, nb, expected, verdicts, quizzes)

    # Two at a time, as the grader's threads would: each re-check is a sandboxed child process.
    with futures.ThreadPoolExecutor(max_workers=2) as pool:
        return dict(pool.map(one, _subjects()))


def test_every_chapter_has_its_release_and_the_left_out_samples_are_here(rechecked):
    assert {s for s in rechecked if s.startswith("release_")} == {f"release_{a}" for a in course.assignments()}
    assert len(rechecked) >= len(course.assignments()) + 25
    graded = set(bank.SAMPLES) - set(bank.recheck_only())
    for a in course.assignments():  # the graded bank keeps a correct and a wrong submission of every chapter
        mine = {s for s in graded if bank.ASSIGNMENT_OF.get(s, bank.A) == a}
        assert any("correct" in s for s in mine) and any("mistake" in s for s in mine), a


def test_the_recheck_gives_the_expected_scores(rechecked):
    wrong = []
    for student, (assignment, nb, expected, verdicts, quizzes) in rechecked.items():
        graded = {**verdicts, **quizzes}
        if expected is None:  # a release: the stubs and the unanswered questions earn nothing
            wrong += [f"{student} {k}: passes the re-check as a stub" for k, v in graded.items() if v.ok]
            assert verdicts and quizzes, f"{student}: nothing graded"
            continue
        for key, points in expected.items():
            if key.startswith("derivation"):
                continue  # written answers: graded by hand
            v = graded.get(key)
            if v is None:
                wrong.append(f"{student} {key}: not graded at all")
            elif v.ok != (points > 0):
                wrong.append(f"{student} {key}: expected {points}, the re-check says {'pass' if v.ok else v.reason}")
    assert not wrong, "\n".join(wrong)


def _visible(exercise_name: str, chunks: list):
    """The notebook's check cell, in-process: the learner's definitions (as the re-check of this
    exercise loads them), then the visible check."""
    namespace: dict = {"__name__": "__learner__"}
    ex = EXERCISES[exercise_name]
    holder = getattr(ex.reference, "__name__", "") if ex.kind == "class" else ""
    for chunk in chunks:
        if not verify.chunk_applies(chunk, exercise_name, holder):
            continue
        try:
            exec(compile(verify.chunk_code(chunk), "<answer>", "exec"), namespace)  # noqa: S102 - the course's own samples
        except Exception:  # noqa: BLE001 - as in the re-check: a definition that cannot load is skipped
            pass
    ex = EXERCISES[exercise_name]
    impl = namespace.get(exercise_name)
    if impl is None and ex.kind == "class":  # a method exercise (split_heads): its class
        impl = namespace.get(getattr(ex.reference, "__name__", ""))
    if impl is None:
        return False, "not defined"
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            run_check(ex, impl, quiet=True)
    except CheckFailure as err:
        return False, str(err).splitlines()[0]
    return True, ""


def test_the_visible_check_agrees_with_the_recheck(rechecked):
    disagree = []
    for student, (assignment, nb, _, verdicts, _) in rechecked.items():
        chunks, _ = verify.definitions(nb)
        for name, v in verdicts.items():
            ok, why = _visible(name, chunks)
            if ok != v.ok:
                disagree.append(f"{student} {name}: the notebook shows {'✅' if ok else why!r}, "
                                f"the grade says {'pass' if v.ok else v.reason!r}")
    assert not disagree, "\n".join(disagree)


def test_each_left_out_sample_fails_what_it_means_to_fail(rechecked):
    """A mistakes sample here that lost nothing would test nothing: each fails at least one code
    exercise; and each sample's id names the chapter it was written for."""
    for student in bank.recheck_only():
        assignment, _, expected, verdicts, _ = rechecked[student]
        assert student.startswith(f"ch{assignment[:2]}_"), student
        if "_mistakes_" in student:
            assert any(not v.ok for v in verdicts.values()), f"{student} passes every re-check"
