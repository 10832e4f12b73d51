"""Self-check questions: formative, answered at once, with a small weight in the grade.

The visible part of a quiz grade cell checks the answer's format and, when the author gives the
answer's ``key`` (a digest, see :func:`quiz_key`) and a ``why``, says at once whether it is right
and why. The hidden part, stripped from the learner's release, asserts the value for the grade.
"""
import hashlib

from ._core import CheckFailure

__all__ = ["check_choice", "check_number", "quiz_key"]


def _digest(text: str) -> str:
    return hashlib.sha256(f"attention-course-quiz:{text}".encode()).hexdigest()[:12]


def quiz_key(answer, decimals: int | None = None) -> str:
    """The digest that a quiz cell's ``key=`` holds for ``answer`` (authors run this once).

    A letter: ``quiz_key("b")``. A number, compared after rounding: ``quiz_key(0.25, decimals=2)``.
    """
    if decimals is not None:
        return _digest(f"{round(float(answer), decimals):.{decimals}f}")
    return _digest(str(answer).strip().lower())


def _verdict(right: bool, why: str | None, shown: str) -> None:
    if right:
        print(f"✅ Right: {shown}." + (f" {why}" if why else ""))
        return
    raise CheckFailure(f"Not quite: {shown} is not the answer." + (f" A hint: {why}" if why else ""))


def check_choice(answer, choices: str = "abcd", key: str | None = None, why: str | None = None) -> None:
    """The answer to a multiple-choice question: one letter from ``choices``, e.g. "b".

    With ``key`` (``quiz_key`` of the right letter) it says at once whether the answer is right;
    ``why`` is one sentence of explanation, shown with the verdict.
    """
    if answer is None or answer is ...:
        raise CheckFailure(f"Set your answer to one of {', '.join(repr(c) for c in choices)}.")
    if not isinstance(answer, str) or answer.strip().lower() not in set(choices):
        raise CheckFailure(
            f"The answer should be one letter out of {', '.join(repr(c) for c in choices)}; got {answer!r}."
        )
    letter = answer.strip().lower()
    if key is None:
        print(f"Answer recorded: {letter!r} (graded when you submit).")
        return
    _verdict(quiz_key(letter) == key, why, repr(letter))


def check_number(answer, key: str | None = None, decimals: int = 2, why: str | None = None) -> None:
    """The answer to a numeric question: an int or a float.

    With ``key`` (``quiz_key(value, decimals)``) it says at once whether the answer, rounded to
    ``decimals`` places, is right.
    """
    if isinstance(answer, bool) or not isinstance(answer, (int, float)):
        raise CheckFailure(f"The answer should be a number (int or float); got {answer!r}.")
    if key is None:
        print(f"Answer recorded: {answer!r} (graded when you submit).")
        return
    _verdict(quiz_key(answer, decimals) == key, why, f"{answer!r}")
