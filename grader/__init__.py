"""The course's grading pipeline around nbgrader: release, sandboxed autograding, feedback.

Run as ``python -m grader <command>`` (the Makefile targets do). See ``grader/README.md``.
"""
import sys

# jsonschema (under nbformat) imports rfc3987_syntax when it is installed (jupyter-events pulls it
# in), and that builds 38 lark grammars: about 1.6 s of CPU in every process that reads a notebook.
# It serves only the "iri" string formats, which no notebook schema uses. The grader's processes
# (this package, the sandboxed _execute.py, the nbgrader commands of course.nbgrader) go without it.
NO_IRI_FORMATS = "rfc3987_syntax"
sys.modules.setdefault(NO_IRI_FORMATS, None)
