"""The grading pipeline, end to end: the sample bank graded to its expected scores with a reason
for every lost point, regrading (1 and 2 workers) gives the same result, no submission over its
time bound, feedback hides the hidden tests. Slow (it executes every sample in the sandbox): marked
`slow`. The release's sync with solutions/ is tests/test_release.py.

What is graded here: every chapter-03 sample (the attacks on the pipeline), and in every other
chapter the correct answers, the first mistakes submission and the attacks. The other samples and
every chapter's learner release go through the re-check alone, which is the grade of every code
exercise: tests/test_bank_recheck.py (``bank.recheck_only()``)."""
import csv
import json
import os
import shutil
import subprocess
import sys

import pytest

from grader import course
from grader.samples import bank

ROOT = course.ROOT
pytestmark = pytest.mark.slow
GRADED = [s for s in bank.SAMPLES if s not in set(bank.recheck_only())]


def _read(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("bank")
    subs = bank.materialize(tmp / "submissions", only=GRADED)
    # 4 workers on 2 cores: a graded kernel spends much of its time waiting (its start, the
    # sandbox, the bank's hanging samples), and the whole of make test used 65% of one core with 2.
    env = dict(os.environ, GRADER_CELL_TIMEOUT="20", GRADEBOOK_URL=f"sqlite:///{tmp}/gradebook.db",
               JUPYTER_CONFIG_PATH=str(course.GRADER), GRADER_WORKERS="4")
    proc = subprocess.run([sys.executable, "-m", "grader", "autograde", "--submissions", str(subs),
                           "--reports", str(tmp / "reports"), "--work", str(tmp / "work")],
                          cwd=ROOT, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-5000:]
    print(proc.stdout)
    return tmp, subs, env


def test_sample_bank_grades_as_expected(graded):
    tmp, _, _ = graded
    rows = _read(tmp / "reports" / "exercises.csv")
    got = {(r["student_id"], r["assignment"], r["exercise"]): float(r["score"]) for r in rows}
    wrong = []
    for student in GRADED:
        what, _, expected = bank.SAMPLES[student]
        assignment = bank.ASSIGNMENT_OF.get(student, bank.A)
        for exercise, score in expected.items():
            actual = got.get((student, assignment, exercise))
            if actual != score:
                reason = next((r["reason"] for r in rows if r["student_id"] == student and r["assignment"] == assignment
                               and r["exercise"] == exercise), "")
                wrong.append(f"{student} ({what}) {exercise}: expected {score}, got {actual} [{reason}]")
    assert not wrong, "\n".join(wrong)
    for r in rows:  # every lost point has a reason
        if float(r["score"]) < float(r["max_score"]):
            assert r["reason"].strip(), r


def test_hostile_submissions_gain_nothing_and_touch_nothing(graded):
    """Issue 7: nothing outside scratch written, no other submission changed, no canary, no reports
    or secret read into a reason, no formula in the CSV, no script in the stored notebooks."""
    tmp, subs, _ = graded
    for d in ("/", "/tmp", "/work", str(tmp)):
        assert not os.path.exists(os.path.join(d, "CANARY-escaped")), d
    correct = json.loads((subs / "correct" / bank.A / f"{bank.A}.ipynb").read_text())
    assert correct["cells"], "another student's submission was overwritten"
    salt = course.secret_path().read_text().strip()
    text = (tmp / "reports" / "exercises.csv").read_text()
    assert salt not in text and "root:x:0:0" not in text
    for r in _read(tmp / "reports" / "exercises.csv"):
        assert not r["reason"][:1] in ("=", "+", "-", "@"), r
    stored = json.loads((tmp / "work" / "submitted" / "hostile_outputs" / bank.A / f"{bank.A}.ipynb").read_text())
    data = [o.get("data", {}) for c in stored["cells"] for o in c.get("outputs", [])]
    html = "".join("".join(d.get("text/html", "")) for d in data)
    assert "onerror" in html, "the sample displays HTML: it must be kept, escaped"
    assert "<script" not in html and "<img" not in html
    assert not any(k for d in data for k in d if k not in ("text/plain", "text/html", "image/png", "text/markdown"))
    assert "BEGIN HIDDEN TESTS" not in json.dumps(stored["cells"][-1])
    assert not (tmp / "work" / "scratch").exists() or not any((tmp / "work" / "scratch").iterdir())


def test_grades_csv_sums_exercises(graded):
    tmp, _, _ = graded
    ex = _read(tmp / "reports" / "exercises.csv")
    for g in _read(tmp / "reports" / "grades.csv"):
        total = sum(float(r["score"]) for r in ex if r["student_id"] == g["student_id"] and r["assignment"] == g["assignment"])
        assert float(g["score"]) == total
    assert {g["student_id"] for g in _read(tmp / "reports" / "grades.csv")} >= set(GRADED)


def test_tampering_is_reported(graded):
    tmp, _, _ = graded
    rows = _read(tmp / "reports" / "exercises.csv")
    edited = next(r for r in rows if r["student_id"] == "tamper_edited_test" and r["exercise"] == "scaled_dot_product_attention")
    assert "was edited" in edited["reason"]
    patched = next(r for r in rows if r["student_id"] == "tamper_patch_checks" and r["exercise"] == "scaled_dot_product_attention")
    assert "independent re-check failed" in patched["reason"]


def test_gradebook_is_the_record(graded):
    """The gradebook holds every student and waits for the derivations to be graded by hand."""
    from nbgrader.api import Gradebook

    tmp, _, env = graded
    with Gradebook(env["GRADEBOOK_URL"], "attention-course") as gb:
        sub = gb.find_submission(bank.A, "correct")
        assert sub.score == 11
        manual = gb.find_grade("derivation_variance", bank.A, bank.A, "correct")
        assert manual.needs_manual_grade
        assert {s.id for s in gb.students} >= set(GRADED)
    autograded = tmp / "work" / "autograded" / "correct" / bank.A / f"{bank.A}.ipynb"
    assert autograded.exists(), "formgrader reads the autograded notebook from the workspace"


# Submissions whose grading draws random numbers (dropout statistics, the variance estimate, a
# statistical judged case, random inputs everywhere) beside ones that fail in odd ways.
REGRADED = ("correct", "mistake_variance_std", "bad_kernel_exit", "tamper_deleted_tests", "bad_corrupt_json",
            "ch05_correct", "ch06_correct")


def _differing(first: dict, rows: list) -> list:
    """The rows of a regrade whose score or reason differs from the bank's first run."""
    return [(k, first.get(k), v) for k, v in
            (((r["student_id"], r["assignment"], r["exercise"]), (r["score"], r["reason"])) for r in rows)
            if first.get(k) != v]


def _first(tmp) -> dict:
    return {(r["student_id"], r["assignment"], r["exercise"]): (r["score"], r["reason"])
            for r in _read(tmp / "reports" / "exercises.csv")}


def test_two_workers_and_regrading_give_identical_results(graded):
    """Issue 7 §4: the same submissions graded again with 2 workers, into the same workspace and
    gradebook, give exactly the scores and reasons of the bank's first (4-worker) run. Grading
    threads share nothing that changes a number (torch's random state is held under a lock), and a
    batch scores and reports only its own students. One worker: the next test."""
    tmp, subs, env = graded
    again = tmp / "again"
    for s in REGRADED:
        shutil.copytree(subs / s, again / s)
    proc = subprocess.run([sys.executable, "-m", "grader", "autograde", "--quiet", "--submissions", str(again),
                           "--reports", str(tmp / "two_workers"), "--work", str(tmp / "work")],
                          cwd=ROOT, env=dict(env, GRADER_WORKERS="2"), capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = _read(tmp / "two_workers" / "exercises.csv")
    # a batch scores only its own students: the first batch's other rows are not in this report
    assert {r["student_id"] for r in rows} == set(REGRADED)
    differ = _differing(_first(tmp), rows)
    assert not differ, f"two workers: {differ[:5]}"


def test_one_worker_gives_identical_results_and_a_bad_student_id_costs_nobody_else(graded, tmp_path):
    """With 1 worker: an id with a trailing newline is refused with a reason, and the others get
    exactly the scores and reasons of the bank's first run: the correct answers, and the variance
    estimate that draws random numbers."""
    tmp, subs, env = graded
    batch = tmp_path / "subs"
    shutil.copytree(subs / "correct", batch / "correct")
    shutil.copytree(subs / "mistake_quiz", batch / "zz\n")
    shutil.copytree(subs / "mistake_variance_std", batch / "mistake_variance_std")
    proc = subprocess.run([sys.executable, "-m", "grader", "autograde", "--quiet", "--submissions", str(batch),
                           "--reports", str(tmp_path / "reports"), "--work", str(tmp / "work")],
                          cwd=ROOT, env=dict(env, GRADER_WORKERS="1"), capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "not a valid student id" in (tmp_path / "reports" / "skipped.txt").read_text()
    rows = _read(tmp_path / "reports" / "exercises.csv")
    assert {r["student_id"] for r in rows} == {"correct", "mistake_variance_std"}
    differ = _differing(_first(tmp), rows)
    assert not differ, f"one worker: {differ[:5]}"


def test_oversized_notebook_is_refused_before_any_work(tmp_path):
    from grader.restore import load_submission

    nb = {"cells": [{"cell_type": "code", "source": "", "metadata": {}, "outputs": []}] * 5000, "metadata": {}}
    (tmp_path / "big.ipynb").write_text(json.dumps(nb))
    data, why = load_submission(tmp_path / "big.ipynb")
    assert data is None and "cells" in why
    (tmp_path / "huge.ipynb").write_bytes(b" " * (9 * 2**20))
    assert "larger" in load_submission(tmp_path / "huge.ipynb")[1]


def test_csv_cells_are_never_formulas():
    from grader.pipeline import cell_safe

    assert cell_safe("=1+1") == "'=1+1" and cell_safe("@SUM(A1)") == "'@SUM(A1)" and cell_safe("ok") == "ok"
    assert cell_safe(3) == 3


def test_feedback_hides_hidden_tests(graded):
    tmp, _, env = graded
    proc = subprocess.run([sys.executable, "-m", "grader", "feedback", "--reports", str(tmp / "reports"),
                           "--out", str(tmp / "feedback"), "--work", str(tmp / "work")],
                          cwd=ROOT, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    html = (tmp / "feedback" / "correct" / f"{bank.A}.html").read_text()
    assert "check_scaled_dot_product_attention" in html
    assert "HIDDEN TESTS" not in html and "seed=3002" not in html
    # a hidden-test marker typed by one learner costs nobody their feedback, that learner included
    assert (tmp / "feedback" / "hostile_outputs" / f"{bank.A}.html").exists()
    assert len(list((tmp / "feedback").glob("*/*.html"))) >= len(GRADED) - 2


def test_no_submission_costs_more_than_its_bound(graded):
    """Issue 7 §4: the worst a submission can cost is the notebook's time limit plus the re-check's
    total (each process's start-up and bookkeeping on top). The bank holds the worst case on
    purpose: ch09_hostile_hang_everything sleeps in every exercise and swallows interrupts."""
    from grader import pipeline, verify

    tmp, _, _ = graded
    timing = json.loads((tmp / "reports" / "timing.json").read_text())["per_submission"]
    bound = pipeline.NOTEBOOK_TIMEOUT + verify.VERIFY_TOTAL_SECONDS + 30  # 60 + 40 + start-ups under load
    worst = max(timing.items(), key=lambda kv: kv[1]["grade_seconds"])
    print(f"\nslowest submission: {worst[0]} {worst[1]['grade_seconds']} s (bound {bound:.0f} s)")
    assert timing["ch09_hostile_hang_everything/09_gqa_and_kv_cache"]["grade_seconds"] >= pipeline.NOTEBOOK_TIMEOUT
    over = {k: v["grade_seconds"] for k, v in timing.items() if v["grade_seconds"] > bound}
    assert not over, over


def test_timing_report(graded):
    """Autograding one submission vs merely executing it (plain nbclient, no sandbox), same run."""
    import time

    import nbformat
    from nbclient import NotebookClient

    tmp, subs, _ = graded
    timing = json.loads((tmp / "reports" / "timing.json").read_text())
    entry = timing["per_submission"][f"correct/{bank.A}"]
    nb = nbformat.read(subs / "correct" / bank.A / f"{bank.A}.ipynb", as_version=4)
    start = time.perf_counter()
    NotebookClient(nb, timeout=120, allow_errors=True, kernel_name="python3",
                   resources={"metadata": {"path": str(tmp)}}).execute()
    plain = time.perf_counter() - start
    report = (f"bank: {timing['submissions']} submissions graded in {timing['total_seconds']} s; 'correct': "
              f"autograde {entry['grade_seconds']} s (sandboxed execution {entry['execute_seconds']} s) vs plain "
              f"execution {plain:.1f} s: ratio {entry['grade_seconds'] / plain:.2f}")
    (tmp / "reports" / "timing.txt").write_text(report + "\n")
    print("\n" + report)
    assert entry["grade_seconds"] > 0 and plain > 0


def test_demo_cells_run_only_their_definitions_and_drop_unused_plotting_imports():
    """Grading runs a locked demo cell as its definitions only; an import of a plotting module is
    left out unless code that runs (a learner's cell, a kept definition) uses a name it binds."""
    import nbformat

    from grader.pipeline import for_execution

    def demo(src):
        return nbformat.v4.new_code_cell(src, metadata={"nbgrader": {"locked": True, "grade": False,
                                                                     "solution": False, "grade_id": "demo-x"}})

    nb = nbformat.v4.new_notebook(cells=[
        demo("import math\nfrom utils.plotting import plot_lines\nimport matplotlib.pyplot as plt\n"
             "x = train_for_a_minute()\nplot_lines([1], {'a': [1]})\nEPS = 1e-6"),
        demo("from utils.plotting import plot_attention\ndef show(w):\n    return plot_attention(w)"),
        demo("from utils.plotting import plot_heads"),
        nbformat.v4.new_code_cell("plot_heads  # the learner's own cell uses it"),
    ])
    run = for_execution(nb)
    assert run.cells[0].source == "import math\nEPS = 1e-06"
    assert "from utils.plotting import plot_attention" in run.cells[1].source  # a kept definition uses it
    assert run.cells[2].source == "from utils.plotting import plot_heads"  # the learner's cell uses it
    assert nb.cells[0].source.startswith("import math\nfrom utils.plotting")  # the submission is untouched


def test_the_visible_verdict_and_the_grade_agree_on_every_honest_sample(graded):
    """Issue 16 §3: for every graded sample that is not an attack on the grader (correct answers,
    the untouched release, realistic mistakes, of all sixteen chapters), and every graded cell, what
    the learner's kernel showed and what the grade says agree: no test cell the kernel passed fails
    the re-check, and none the kernel failed passes it. The samples judged by the re-check alone,
    and every chapter's release: tests/test_bank_recheck.py, with the visible check run in-process."""
    tmp, _, _ = graded
    from grader.restore import grade_id

    honest = [s for s in GRADED if not any(w in s for w in ("hostile", "tamper", "bad_", "forbidden"))]
    disagree = []
    for student in honest:
        for path in (tmp / "work" / "submitted" / student).glob("*/*.ipynb"):
            nb = json.loads(path.read_text())
            for cell in nb["cells"]:
                gid = grade_id(cell)
                outs = cell.get("outputs", [])
                text = json.dumps(outs)
                kernel_failed = any(o.get("output_type") == "error" and o.get("ename") != "VerificationError" for o in outs)
                grade_failed = any(o.get("output_type") == "error" and o.get("ename") == "VerificationError" for o in outs)
                if grade_failed and not kernel_failed:
                    disagree.append(f"{student} {gid}: ✅ in the notebook, 0 in the grade: {text[:300]}")
                if "in the notebook this cell did not pass" in text and not any(
                        w in text for w in ("TimeoutError", "NotExecuted", "DeadKernelError")):  # no verdict shown
                    disagree.append(f"{student} {gid}: failed in the notebook, full marks in the grade: {text[:300]}")
    assert len(honest) >= 35
    assert not disagree, "\n".join(disagree)


def test_round_two_attacks_leave_no_script_in_what_is_rendered(graded):
    """Issue 18 §4: the stored notebook of hostile_unlock (what formgrader shows and the feedback
    renders) has no link, image or reference whose destination is not http(s) or #, no raw tag
    from learner markdown, no SVG; and its feedback page, where made, has no live javascript: link."""
    from html.parser import HTMLParser

    from nbconvert.filters.markdown_mistune import markdown2html_mistune

    from grader.restore import is_answer

    tmp, _, _ = graded
    stored = json.loads((tmp / "work" / "submitted" / "hostile_unlock" / bank.A / f"{bank.A}.ipynb").read_text())
    found = []

    class Links(HTMLParser):
        def handle_starttag(self, tag, attrs):
            found.extend((tag, k, (v or "").strip().lower()) for k, v in attrs)

    rendered = [markdown2html_mistune("".join(c["source"])) for c in stored["cells"]
                if c["cell_type"] == "markdown" and is_answer(c)]
    rendered += ["".join(o.get("data", {}).get("text/markdown", "")) for c in stored["cells"] for o in c.get("outputs", [])]
    rendered += ["".join(o.get("data", {}).get("text/html", "")) for c in stored["cells"] for o in c.get("outputs", [])]
    assert any("javascript" in r for r in rendered), "the sample's links must still be there, defused"
    for html_text in rendered:
        Links().feed(markdown2html_mistune(html_text) if "](" in html_text else html_text)
    bad = [f for f in found if f[1] in ("href", "src") and not f[2].startswith(("http://", "https://", "#"))]
    bad += [f for f in found if f[1].startswith("on") or f[1] == "style" or f[0] in ("svg", "script", "style")]
    assert not bad, bad
    page = tmp / "feedback" / "hostile_unlock" / f"{bank.A}.html"
    if page.exists():
        found.clear()
        Links().feed(page.read_text())
        assert not [f for f in found if f[1] in ("href", "src") and f[2].startswith(("javascript:", "data:text", "vbscript:"))]


def test_the_bank_exports_to_canvas_and_any_lms(graded):
    """make export on the bank's gradebook (issue 19 §3): a roster in Canvas's export format with
    every bank student but one, plus a student who submitted nothing; the export files are kept in
    reports/lms_bank/ for the record."""
    from grader.export import export, gradebook_scores, read_roster

    tmp, _, env = graded
    assignments, scores = gradebook_scores(env["GRADEBOOK_URL"])
    graded_ids = sorted(scores)
    left_off, on_roster = graded_ids[0], graded_ids[1:]
    roster = tmp / "canvas_roster.csv"
    with open(roster, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["Student", "ID", "SIS User ID", "SIS Login ID", "Section"])
        w.writerow(["    Points Possible", "", "", "", ""])
        for i, s in enumerate(on_roster + ["nobody_submitted"]):
            w.writerow([f"Student {i}", 1000 + i, f"S{i:04d}", s, "A" if i % 2 else "B"])
    assert len(read_roster(roster)) == len(on_roster) + 1
    import io
    err = io.StringIO()
    summary = export(tmp / "lms", roster, db_url=env["GRADEBOOK_URL"], stderr=err)
    assert summary["unmatched"] == [left_off] and left_off in err.getvalue()
    canvas = list(csv.reader(open(tmp / "lms" / "canvas.csv", newline="")))
    assert canvas[0][:5] == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section"] and canvas[1][0] == "Points Possible"
    assert len(canvas) == 2 + len(on_roster) + 1
    assert all(c == "" for c in canvas[-1][5:])  # no submission: empty cells (the default)
    assert canvas[1][5:] == [str(m) for _, m in assignments]
    wide = {r["student_id"]: r for r in _read(tmp / "lms" / "grades_wide.csv")}
    for s in on_roster:
        assert float(wide[s]["total"]) == pytest.approx(sum(scores[s].values())), s
    keep = ROOT / "reports" / "lms_bank"
    keep.mkdir(parents=True, exist_ok=True)
    for name in ("canvas.csv", "grades_wide.csv", "unmatched.csv"):
        shutil.copy(tmp / "lms" / name, keep / name)
    shutil.copy(roster, keep / "canvas_roster.csv")
