"""The grading pipeline, end to end: the sample bank graded to its expected scores with a reason
for every lost point, regrading (1 and 2 workers) gives the same result, no submission over its
time bound, feedback hides the hidden tests and the rubric. Slow (it executes every sample in the
sandbox): marked `slow`. The release's sync with solutions/ is tests/test_release.py.

The bank is graded the way the README tells an instructor to (issue 25 §3): the submissions lie
where `nbgrader collect` puts them, in the workspace's submitted/ folder, each with the
timestamp.txt and submission_secret.txt collect writes, and `make autograde` reads them there;
one chapter has a due date and nbgrader's own late-submission setting (penalty "zero"), with one
late copy of the correct answers; and the grader's environment holds an instructor's secrets
(PGPASSWORD, AWS_SECRET_ACCESS_KEY, CANVAS_API_TOKEN), which nothing graded may show.

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


# The instructor's secrets, in the environment grading runs in: nothing graded may show them.
SECRETS = {"PGPASSWORD": "pg-secret-5b1e", "AWS_SECRET_ACCESS_KEY": "aws-secret-9c2f",
           "CANVAS_API_TOKEN": "canvas-token-77d0"}
DUE = "2030-01-01 00:00:00"  # chapter 03's due date; every submission is on time but LATE's
ON_TIME, LATE_AT = "2029-12-31 18:30:00.000000 UTC", "2030-01-02 09:00:00.000000 UTC"
LATE = "late_correct"  # the correct answers, handed in late: nbgrader's penalty "zero"


def _digests(folder) -> dict:
    import hashlib

    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file() and not p.is_symlink()}


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    from nbgrader.api import Gradebook

    tmp = tmp_path_factory.mktemp("bank")
    work = tmp / "work"
    subs = bank.materialize(work / "submitted", only=GRADED)  # where `nbgrader collect` puts them
    shutil.copytree(subs / "correct", subs / LATE)
    for folder in subs.glob("*/*"):  # what collect writes beside each notebook
        if folder.is_dir() and not folder.is_symlink():
            (folder / "timestamp.txt").write_text(LATE_AT if folder.parent.name == LATE else ON_TIME)
            (folder / "submission_secret.txt").write_text(f"secret-of-{folder.parent.name}")
    before = _digests(subs)
    late_config = tmp / "late-config"  # the instructor's own nbgrader settings
    late_config.mkdir()
    (late_config / "nbgrader_config.py").write_text('c = get_config()\nc.LateSubmissionPlugin.penalty_method = "zero"\n')
    url = f"sqlite:///{tmp}/gradebook.db"
    with Gradebook(url, "attention-course") as gb:
        gb.update_or_create_assignment(bank.A, duedate=DUE)
    # 4 workers on 2 cores: a graded kernel spends much of its time waiting (its start, the
    # sandbox, the bank's hanging samples), and the whole of make test used 65% of one core with 2.
    env = dict(os.environ, GRADER_CELL_TIMEOUT="20", GRADEBOOK_URL=url, GRADER_WORKERS="4",
               JUPYTER_CONFIG_PATH=os.pathsep.join([str(late_config), str(course.GRADER)]), **SECRETS)
    proc = subprocess.run([sys.executable, "-m", "grader", "autograde", "--submissions", str(subs),
                           "--reports", str(tmp / "reports"), "--work", str(work)],
                          cwd=ROOT, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-5000:]
    print(proc.stdout)
    return tmp, subs, env, before


def test_sample_bank_grades_as_expected(graded):
    tmp, _, _, _ = graded
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
    tmp, subs, _, _ = graded
    for d in ("/", "/tmp", "/work", str(tmp)):
        assert not os.path.exists(os.path.join(d, "CANARY-escaped")), d
    correct = json.loads((subs / "correct" / bank.A / f"{bank.A}.ipynb").read_text())
    assert correct["cells"], "another student's submission was overwritten"
    salt = course.secret_path().read_text().strip()
    text = (tmp / "reports" / "exercises.csv").read_text()
    assert salt not in text and "root:x:0:0" not in text
    for r in _read(tmp / "reports" / "exercises.csv"):
        assert not r["reason"][:1] in ("=", "+", "-", "@"), r
    stored = json.loads((tmp / "work" / "restored" / "hostile_outputs" / bank.A / f"{bank.A}.ipynb").read_text())
    data = [o.get("data", {}) for c in stored["cells"] for o in c.get("outputs", [])]
    html = "".join("".join(d.get("text/html", "")) for d in data)
    assert any("text/html" in d for d in data), "the sample displays HTML: it must be kept, sanitised"
    assert "<script" not in html and "<img" not in html and "onerror" not in html
    assert not any(k for d in data for k in d if k not in ("text/plain", "text/html", "image/png", "text/markdown"))
    assert "BEGIN HIDDEN TESTS" not in json.dumps(stored["cells"][-1])
    assert not (tmp / "work" / "scratch").exists() or not any((tmp / "work" / "scratch").iterdir())


def test_grades_csv_sums_exercises(graded):
    tmp, _, _, _ = graded
    ex = _read(tmp / "reports" / "exercises.csv")
    for g in _read(tmp / "reports" / "grades.csv"):
        total = sum(float(r["score"]) for r in ex if r["student_id"] == g["student_id"] and r["assignment"] == g["assignment"])
        assert float(g["score"]) + float(g["late_penalty"]) == total  # nbgrader's score after its late penalty
    assert {g["student_id"] for g in _read(tmp / "reports" / "grades.csv")} >= set(GRADED)


def test_tampering_is_reported(graded):
    tmp, _, _, _ = graded
    rows = _read(tmp / "reports" / "exercises.csv")
    edited = next(r for r in rows if r["student_id"] == "tamper_edited_test" and r["exercise"] == "scaled_dot_product_attention")
    assert "was edited" in edited["reason"]
    patched = next(r for r in rows if r["student_id"] == "tamper_patch_checks" and r["exercise"] == "scaled_dot_product_attention")
    assert "independent re-check failed" in patched["reason"]


def test_gradebook_is_the_record(graded):
    """The gradebook holds every student and waits for the derivations to be graded by hand."""
    from nbgrader.api import Gradebook

    tmp, _, env, _ = graded
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
    tmp, subs, env, _ = graded
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
    tmp, subs, env, _ = graded
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


@pytest.fixture(scope="module")
def feedback(graded):
    """`make feedback` on the bank, once: (folder of the pages, seconds it took)."""
    import time

    tmp, _, env, _ = graded
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "grader", "feedback", "--reports", str(tmp / "reports"),
                           "--out", str(tmp / "feedback"), "--work", str(tmp / "work")],
                          cwd=ROOT, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return tmp / "feedback", time.monotonic() - start


def test_feedback_hides_hidden_tests(graded, feedback):
    tmp, _, env, _ = graded
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

    tmp, _, _, _ = graded
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

    tmp, subs, _, _ = graded
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
    tmp, _, _, _ = graded
    from grader.restore import grade_id

    honest = [s for s in GRADED if not any(w in s for w in ("hostile", "tamper", "bad_", "forbidden"))]
    disagree = []
    for student in honest:
        for path in (tmp / "work" / "restored" / student).glob("*/*.ipynb"):
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


def test_round_two_attacks_leave_no_script_in_what_is_rendered(graded, feedback):
    """Issue 18 §4: the stored notebook of hostile_unlock (what formgrader shows and the feedback
    renders) has no link, image or reference whose destination is not http(s) or #, no raw tag
    from learner markdown, no SVG; and its feedback page, where made, has no live javascript: link."""
    from html.parser import HTMLParser

    from nbconvert.filters.markdown_mistune import markdown2html_mistune

    from grader.restore import is_answer

    tmp, _, _, _ = graded
    stored = json.loads((tmp / "work" / "restored" / "hostile_unlock" / bank.A / f"{bank.A}.ipynb").read_text())
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


def test_the_bank_exports_to_canvas_and_any_lms(graded, tmp_path):
    """make export on the bank's gradebook (issue 19 §3, issue 25 §3): a roster in Canvas's export
    format with every bank student but one, plus a student who submitted nothing. While a chapter's
    derivation waits for hand grading its cell stays empty and pending.csv (and the terminal) name
    the student and chapter; once graded (as formgrader records it), the cell holds the chapter's
    points; a row's total is the sum of its cells, and empty for a student with no number. The
    export files are kept in reports/lms_bank/ for the record."""
    import io

    from nbgrader.api import Gradebook

    from grader.export import chapter_title, export, gradebook_scores, read_roster

    tmp, _, env, _ = graded
    book = tmp_path / "gradebook.db"  # a copy: the other tests read the bank's own records
    shutil.copy(tmp / "gradebook.db", book)
    url = f"sqlite:///{book}"
    pending: dict = {}
    assignments, scores = gradebook_scores(url, pending)
    graded_ids = sorted(set(scores) | set(pending))
    assert pending.get("correct", {}).get(bank.A) == ["derivation_variance"]
    left_off, on_roster = graded_ids[0], graded_ids[1:]
    roster = tmp_path / "canvas_roster.csv"
    with open(roster, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["Student", "ID", "SIS User ID", "SIS Login ID", "Section"])
        w.writerow(["    Points Possible", "", "", "", ""])
        for i, s in enumerate(on_roster + ["nobody_submitted"]):
            w.writerow([f"Student {i}", 1000 + i, f"S{i:04d}", s, "A" if i % 2 else "B"])
    assert len(read_roster(roster)) == len(on_roster) + 1

    def check(out, expect_pending):
        err = io.StringIO()
        summary = export(out, roster, db_url=url, stderr=err)
        assert summary["unmatched"] == [left_off] and left_off in err.getvalue()
        canvas = list(csv.reader(open(out / "canvas.csv", newline="")))
        assert canvas[0][:5] == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section"] and canvas[1][0] == "Points Possible"
        assert len(canvas) == 2 + len(on_roster) + 1
        assert all(c == "" for c in canvas[-1][5:])  # no submission: empty cells (the default)
        assert canvas[1][5:] == [str(m) for _, m in assignments]
        titles = canvas[0][5:]
        rows = {r[3]: dict(zip(titles, r[5:])) for r in canvas[2:]}
        waiting = {(r["student_id"], r["assignment"]) for r in _read(out / "pending.csv")}
        assert bool(waiting) == expect_pending
        for student, chapters in summary["pending"].items():
            for a in chapters:
                assert (student, a) in waiting and f"{student}: {chapter_title(a)}" in err.getvalue()
                if student in rows:
                    assert rows[student][chapter_title(a)] == "", (student, a)  # never a partial grade
        wide = {r["student_id"]: r for r in _read(out / "grades_wide.csv")}
        for s in on_roster:
            cells = [wide[s][t] for t in titles if wide[s][t] != ""]
            assert wide[s]["total"] == ("" if not cells else wide[s]["total"])
            if cells:
                assert float(wide[s]["total"]) == pytest.approx(sum(float(c) for c in cells)), s
        assert wide["nobody_submitted"]["total"] == ""  # empty cells, and so an empty total, not 0
        return rows

    rows = check(tmp_path / "lms", expect_pending=True)
    assert rows["correct"][chapter_title(bank.A)] == ""
    # The instructor grades the derivations in formgrader (what it records: a manual score).
    with Gradebook(url, "attention-course") as gb:
        for student in gb.students:
            for sub in gb.student_submissions(student.id):
                for nb in sub.notebooks:
                    for g in nb.grades:
                        if g.needs_manual_grade:
                            g.manual_score = g.max_score
                            g.needs_manual_grade = False
        gb.db.commit()
    rows = check(tmp_path / "lms2", expect_pending=False)
    assert rows["correct"][chapter_title(bank.A)] == "14"  # 11 and the derivation's 3
    # late, penalty "zero": nbgrader assesses the penalty when it scores (11 of the autograded 11);
    # points given by hand afterwards are not penalised (nbgrader's own rule)
    assert rows[LATE][chapter_title(bank.A)] == "3"
    zero = export(tmp_path / "lms3", roster, db_url=url, missing="zero", stderr=io.StringIO())
    assert not zero["pending"]
    wide = {r["student_id"]: r for r in _read(tmp_path / "lms3" / "grades_wide.csv")}
    assert wide["nobody_submitted"]["total"] == "0"
    keep = ROOT / "reports" / "lms_bank"
    keep.mkdir(parents=True, exist_ok=True)
    for name in ("canvas.csv", "grades_wide.csv", "unmatched.csv", "pending.csv"):
        shutil.copy(tmp_path / "lms" / name, keep / name)
    shutil.copy(roster, keep / "canvas_roster.csv")


# ------------------------------------------------------------------ issue 25 §3: nothing lost
def test_grading_keeps_every_collected_file(graded):
    """`make autograde SUBMISSIONS=grader/work/submitted`, where `nbgrader collect` puts the class's
    work: every collected file (notebooks, timestamp.txt, submission_secret.txt) is still there,
    byte for byte, after the bank and its regrades."""
    tmp, subs, _, before = graded
    assert _digests(subs) == before
    assert (subs / "correct" / bank.A / "timestamp.txt").read_text() == ON_TIME
    assert (subs / "correct" / bank.A / "submission_secret.txt").exists()


def test_timestamps_reach_the_gradebook_and_late_penalties_apply(graded):
    """The collected timestamp.txt reaches nbgrader's gradebook, so nbgrader's own late-submission
    setting works: chapter 03 is due on DUE, LateSubmissionPlugin.penalty_method = "zero" in the
    instructor's configuration; the late copy of the correct answers scores 0, the on-time one 11."""
    from datetime import datetime

    from nbgrader.api import Gradebook

    tmp, _, env, _ = graded
    with Gradebook(env["GRADEBOOK_URL"], "attention-course") as gb:
        on_time, late = gb.find_submission(bank.A, "correct"), gb.find_submission(bank.A, LATE)
        assert on_time.timestamp == datetime(2029, 12, 31, 18, 30) and on_time.total_seconds_late == 0
        assert on_time.late_submission_penalty == 0
        assert late.timestamp == datetime(2030, 1, 2, 9, 0) and late.total_seconds_late > 0
        assert late.score == 11 and late.late_submission_penalty == 11
    grades = {(r["student_id"], r["assignment"]): r for r in _read(tmp / "reports" / "grades.csv")}
    assert grades[("correct", bank.A)]["score"] == "11" and grades[("correct", bank.A)]["late_penalty"] == "0"
    assert grades[(LATE, bank.A)]["score"] == "0" and grades[(LATE, bank.A)]["late_penalty"] == "11"
    assert grades[(LATE, bank.A)]["submitted_at"].startswith("2030-01-02 09:00:00")


def test_grading_refuses_to_write_its_own_input(graded, tmp_path):
    """An input folder that grading writes (its restored notebooks, formgrader's autograded copy,
    the workspace around them) is refused before anything is read or written; and nothing of the
    workspace changed."""
    tmp, _, env, _ = graded
    restored = tmp / "work" / "restored"
    before = _digests(restored)
    for folder in (restored, tmp / "work" / "autograded", tmp / "work"):
        proc = subprocess.run([sys.executable, "-m", "grader", "autograde", "--quiet", "--submissions", str(folder),
                               "--reports", str(tmp_path / "reports"), "--work", str(tmp / "work")],
                              cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
        assert proc.returncode != 0 and "which grading writes" in proc.stderr, proc.stderr[-2000:]
    assert _digests(restored) == before and not (tmp_path / "reports").exists()


def test_the_class_is_scored_in_one_nbgrader_run(graded):
    """Issue 25 §2: no learner metadata reaches nbgrader (restore keeps none), so no notebook makes
    the batch's shared nbgrader run fail and every student rescored one at a time."""
    tmp, _, _, _ = graded
    assert not list((tmp / "work").glob("nbgrader-autograde-*.log"))


# ------------------------------------------------------- issue 25 §1, §2: round three, end to end
def test_no_secret_of_the_grader_reaches_anything_graded(graded, feedback):
    """The grader's environment held PGPASSWORD, AWS_SECRET_ACCESS_KEY and CANVAS_API_TOKEN: a
    kernel cell printed its whole environment (hostile_script_refs), and none of them is in any
    stored notebook, formgrader's copies, the feedback or the reports."""
    tmp, _, _, _ = graded
    printed = (tmp / "work" / "restored" / "hostile_script_refs" / bank.A / f"{bank.A}.ipynb").read_text()
    assert "'HOME'" in printed, "the sample's cell printed the kernel's environment"
    leaks = []
    for folder in (tmp / "work" / "restored", tmp / "work" / "autograded", tmp / "work" / "feedback",
                   tmp / "reports", feedback[0]):
        for path in folder.rglob("*"):
            if path.is_file():
                data = path.read_bytes()
                leaks += [f"{path}: {k}" for k, v in SECRETS.items() if v.encode() in data]
    assert not leaks, leaks


def _attributes(html_text: str) -> list:
    from html.parser import HTMLParser

    found = []

    class P(HTMLParser):
        def handle_starttag(self, tag, attrs):
            found.extend((tag, k, (v or "").strip().lower()) for k, v in attrs)

    P().feed(html_text)
    return found


def _formgrader_page(path) -> str:
    """A submission's page as formgrader renders it (its HTMLExporter and 'formgrade' template)."""
    from nbconvert.exporters import HTMLExporter
    from nbgrader.server_extensions.formgrader import handlers
    from traitlets.config import Config

    c = Config()
    c.HTMLExporter.template_name = "formgrade"
    c.HTMLExporter.extra_template_basedirs = [handlers.template_path]
    html, _ = HTMLExporter(config=c).from_filename(str(path), resources={
        "base_url": "/", "notebook_id": bank.A, "index": 0, "total": 1, "assignment_id": bank.A,
        "submission_id": "x", "student": "s", "last_name": "", "first_name": "", "notebook_path": "/x"})
    return html


def test_round_three_scripts_are_dead_in_formgrader_and_the_feedback(graded, feedback):
    """Markdown reference definitions to javascript: (in a block quote, a list item, under an
    escaped label), a MathJax \\href, a raw cell and an HTML output of 26,000 nested tags: no live
    link or script of the learner's in formgrader's page or in the feedback, and both are made in
    bounded time (the raw cell took 366 s in make feedback, and formgrader's page did not open)."""
    import time

    tmp, _, _, _ = graded
    folder, seconds = feedback
    start = time.monotonic()
    page = _formgrader_page(tmp / "work" / "autograded" / "hostile_script_refs" / bank.A / f"{bank.A}.ipynb")
    took = time.monotonic() - start
    fb = (folder / "hostile_script_refs" / f"{bank.A}.html").read_text()
    print(f"\nformgrader's page of hostile_script_refs: {took:.1f} s; make feedback for the bank: {seconds:.0f} s")
    assert took < 30, took
    for html_text in (page, fb):
        bad = [a for a in _attributes(html_text) if a[1] in ("href", "src", "action", "formaction", "xlink:href")
               and a[2].replace("\x00", "").replace(" ", "").startswith(("javascript:", "data:", "vbscript:"))]
        assert not bad, bad
        assert "alert(" not in "".join(v for _, k, v in _attributes(html_text)), "a handler or link of the learner's"
        assert html_text.count("<div>") < 10_000  # the bombs are text, or cut to a bounded size, not 26,000 tags
    assert "&lt;div&gt;&lt;div&gt;" in fb  # the raw cell's 26,000 tags: shown as text


def test_formgrader_shows_the_rubric_and_no_feedback_does(graded, feedback, tmp_path):
    """Issue 26 §1, the grader's side: the derivation's model answer and marking scheme (the
    solution cell of solutions/) is in formgrader's copy right after the learner's answer, and in
    the page formgrader renders; `make feedback` never shows it, nor does formgrader's own
    "Generate feedback" (nbgrader with the course's configuration)."""
    from grader.restore import grade_id
    from grader.rubric import HEADING, MARK, rubrics

    import re

    tmp, _, env, _ = graded
    model = rubrics(course.load_json(course.source_path(bank.A)))["derivation_variance"]
    release = course.release_path(bank.A).read_text()
    # a phrase of the model answer in plain words that the release does not hold (what the
    # learner was given may still quote parts of it: issue 26 §1 is another helper's)
    sentence = next(p.strip() for p in re.findall(r"[A-Za-z][A-Za-z ,]{24,}", model) if p.strip() not in release)
    autograded = tmp / "work" / "autograded" / "hostile_script_refs" / bank.A / f"{bank.A}.ipynb"
    cells = json.loads(autograded.read_text())["cells"]
    i = next(i for i, c in enumerate(cells) if grade_id(c) == "derivation_variance")
    assert MARK in cells[i + 1]["metadata"] and model in "".join(cells[i + 1]["source"])
    assert sentence in _formgrader_page(autograded)
    folder, _ = feedback
    for page in folder.glob("*/*.html"):
        text = page.read_text()
        assert "for the instructor only" not in text, page
    assert sentence not in (folder / "hostile_script_refs" / f"{bank.A}.html").read_text()
    proc = course.nbgrader("generate_feedback", bank.A, "--force", "--CourseDirectory.student_id=hostile_script_refs",
                           f"--CourseDirectory.submitted_directory={tmp / 'work' / 'restored'}",
                           f"--CourseDirectory.autograded_directory={tmp / 'work' / 'autograded'}",
                           f"--CourseDirectory.feedback_directory={tmp_path}", db=env["GRADEBOOK_URL"], check=False)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    page = (tmp_path / "hostile_script_refs" / bank.A / f"{bank.A}.html").read_text()
    assert "The variance is" in page and sentence not in page and HEADING[:30] not in page


def test_feedback_speaks_the_submissions_language(graded, feedback):
    """Issue 28 §5: a Chinese submission is graded as its English twin (the bank's expected scores)
    and its feedback speaks Chinese: the check's verdict, the prose around it; the English twin's
    stays English."""
    tmp, _, _, _ = graded
    a = "00_foundations"
    zh = (tmp / "feedback" / "ch00_zh_overflow" / f"{a}.html").read_text(encoding="utf-8")
    en = (tmp / "feedback" / "ch00_mistakes_overflow" / f"{a}.html").read_text(encoding="utf-8")
    assert "个用例中有" in zh and "cases failed" not in zh, "the check's verdict in Chinese"
    assert "cases failed" in en and "个用例中有" not in en
    assert "动机（Motivation）" in zh and "动机（Motivation）" not in en
