"""nbgrader configuration for the course. It finds the repository from its own location.

Found by nbgrader through JUPYTER_CONFIG_PATH (the Makefile sets it to this folder), so that
`make lab` (formgrader) and the `python -m grader` commands see the same course.
"""
import os
from pathlib import Path

c = get_config()  # noqa: F821 (provided by traitlets when nbgrader loads this file)

ROOT = Path(__file__).resolve().parent.parent

c.CourseDirectory.root = str(ROOT)
c.CourseDirectory.course_id = "attention-course"
c.CourseDirectory.source_directory = "solutions"
c.CourseDirectory.release_directory = "notebooks"
c.CourseDirectory.submitted_directory = "grader/work/submitted"
c.CourseDirectory.autograded_directory = "grader/work/autograded"
c.CourseDirectory.feedback_directory = "grader/work/feedback"
# The gradebook: SQLite in grader/ unless GRADEBOOK_URL names another SQLAlchemy URL (PostgreSQL
# for a large class, e.g. postgresql://user@host/attention).
c.CourseDirectory.db_url = os.environ.get("GRADEBOOK_URL", f"sqlite:///{ROOT / 'grader' / 'gradebook.db'}")

# The exchange (where nbgrader's release_assignment puts a chapter, learners fetch and submit, and
# collect gathers): NBGRADER_EXCHANGE when set (a hub's shared folder, e.g. /srv/nbgrader/exchange,
# writable by every learner); else inside the course, made on demand and git-ignored, so that
# formgrader starts without a warning about a missing system folder.
EXCHANGE = Path(os.environ.get("NBGRADER_EXCHANGE") or ROOT / "grader" / "work" / "exchange")
try:
    EXCHANGE.mkdir(parents=True, exist_ok=True)
except OSError:
    pass
c.Exchange.root = str(EXCHANGE)

c.ClearSolutions.code_stub = {"python": "# YOUR CODE HERE\nraise NotImplementedError()"}
c.ClearSolutions.text_stub = "YOUR ANSWER HERE"
c.ClearHiddenTests.begin_test_delimeter = "BEGIN HIDDEN TESTS"
c.ClearHiddenTests.end_test_delimeter = "END HIDDEN TESTS"
# Learner notebooks run the checks from utils: a cell may take a while on a slow laptop.
c.ExecutePreprocessor.timeout = 120

# The course's own demo code cells (every code cell that is neither an answer nor a test) become
# locked, read-only nbgrader cells in the release. They score nothing; grading restores them from
# the release (a learner's edit cannot change what runs) and executes only their definitions
# (imports, functions, classes, constants: grader/pipeline.py, `for_execution`), so a training demo
# never runs at grading time. Ids come from the cells' own nbformat ids, so they are stable.
from nbgrader.preprocessors import NbGraderPreprocessor  # noqa: E402 (enabled by default)
from nbgrader.converters import GenerateAssignment  # noqa: E402


class LockDemoCells(NbGraderPreprocessor):
    def preprocess_cell(self, cell, resources, index):
        if cell.cell_type == "code" and "nbgrader" not in cell.metadata:
            cell.metadata["nbgrader"] = {"grade": False, "solution": False, "locked": True, "task": False,
                                         "grade_id": f"demo-{cell.get('id') or index}", "schema_version": 3}
        return cell, resources


class QuizAnswersNeedNoStub(NbGraderPreprocessor):
    """A self-check answer cell is ``answer_k = None`` in the release: setting the answer is all it
    takes, so nbgrader's code stub (``raise NotImplementedError()``) is taken out of it again."""

    def preprocess_cell(self, cell, resources, index):
        gid = cell.metadata.get("nbgrader", {}).get("grade_id", "")
        if cell.cell_type == "code" and gid.startswith("quiz_"):
            stub = c.ClearSolutions.code_stub["python"].splitlines()
            lines = [ln for ln in cell.source.splitlines() if ln.strip() not in {s.strip() for s in stub}]
            cell.source = "\n".join(lines).rstrip()
        return cell, resources


_DEFAULT = GenerateAssignment.class_traits()["preprocessors"].default()
_AFTER = next(i for i, p in enumerate(_DEFAULT) if p.__name__ == "ClearSolutions") + 1
c.GenerateAssignment.preprocessors = [LockDemoCells, *_DEFAULT[:_AFTER], QuizAnswersNeedNoStub, *_DEFAULT[_AFTER:]]

# nbgrader's own autograde (formgrader's ⚡ "Autograde" button beside every submission, and
# `nbgrader autograde` run by hand) would execute learner code in the instructor's own Jupyter
# server, without the sandbox. With this course's configuration it refuses, and says what to run
# instead; `python -m grader autograde` (make autograde) executes in the sandbox and then runs
# nbgrader's scoring with its own configuration, which has no execution step (grader/pipeline.py,
# NO_EXEC_CONFIG, which replaces this list).
from nbgrader.preprocessors import NbGraderPreprocessor as _Preprocessor  # noqa: E402


class RefuseUnsandboxedAutograde(_Preprocessor):
    def preprocess(self, nb, resources):
        raise RuntimeError(
            "This course does not let nbgrader execute submissions: learner code runs only in the grading "
            "sandbox. Run `make autograde` (python -m grader autograde --submissions DIR --reports DIR): it "
            "executes each submission sandboxed and records the grades in this gradebook, where formgrader "
            "shows them for manual grading.")


c.Autograde.autograde_preprocessors = [RefuseUnsandboxedAutograde]

# The hand-graded derivations' model answer and rubric are shown to the instructor in formgrader,
# beside each submission's answer (grader/rubric.py puts them in the autograded copy after
# scoring, as cells marked "attention_course_rubric" in their metadata). Feedback never shows
# them: formgrader's own "Generate feedback" runs these preprocessors (and `make feedback` the
# same ones, grader/pipeline.py). The hidden tests are cleared from feedback too.
from nbconvert.preprocessors import CSSHTMLHeaderPreprocessor  # noqa: E402
from nbgrader.preprocessors import ClearHiddenTests, GetGrades  # noqa: E402

RUBRIC_MARK = "attention_course_rubric"  # grader/rubric.py's MARK (tests/test_grading_design.py checks they agree)


class RemoveRubric(_Preprocessor):
    def preprocess(self, nb, resources):
        nb.cells = [cell for cell in nb.cells if RUBRIC_MARK not in (cell.get("metadata") or {})]
        return nb, resources


c.GenerateFeedback.preprocessors = [RemoveRubric, GetGrades, ClearHiddenTests, CSSHTMLHeaderPreprocessor]
