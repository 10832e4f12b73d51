"""The course's grading pipeline around nbgrader: release, sandboxed autograding, feedback.

Run as ``python -m grader <command>`` (the Makefile targets do). See ``grader/README.md``.
"""
