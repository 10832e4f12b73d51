"""Format checks for auto-graded self-check questions.

The visible part of a quiz grade cell only checks the *format* of the answer (so a typo does not
cost a point silently); the hidden part, stripped from the learner's release, checks the value.
"""
from ._core import CheckFailure

__all__ = ["check_choice", "check_number"]


def check_choice(answer, choices: str = "abcd") -> None:
    """The answer to a multiple-choice question is one letter from ``choices``, e.g. "b"."""
    if answer is None or answer is ...:
        raise CheckFailure(f"Set your answer to one of {', '.join(repr(c) for c in choices)}.")
    if not isinstance(answer, str) or answer.strip().lower() not in set(choices):
        raise CheckFailure(
            f"The answer should be one letter out of {', '.join(repr(c) for c in choices)}; got {answer!r}."
        )
    print(f"Answer recorded: {answer.strip().lower()!r} (graded when you submit).")


def check_number(answer) -> None:
    """The answer to a numeric question is an int or a float."""
    if isinstance(answer, bool) or not isinstance(answer, (int, float)):
        raise CheckFailure(f"The answer should be a number (int or float); got {answer!r}.")
    print(f"Answer recorded: {answer!r} (graded when you submit).")
