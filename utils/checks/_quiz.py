"""Self-check questions: formative, answered at once, with a small weight in the grade.

The visible part of a quiz grade cell checks the answer's format and, when the author gives the
answer's ``key`` (a digest salted with the question's id ``qid``, see :func:`quiz_key`), says at
once whether it is right:

* a right answer prints ✅ and the explanation ``why``;
* a wrong answer raises with the ``hint``: which idea to revisit, never the answer. The ``why`` is
  never shown for a wrong answer.

The test cell is visible in the learner's release, so its ``why`` (which states the answer) is
*sealed* (:func:`seal_why`): encrypted with a key derived from the question's id and its right
answer. Only the right answer opens it, so reading the cell gives nothing away. (The plain text
sits in the cell's hidden-tests block, for the course's authors.)

The hidden part, stripped from the learner's release, asserts the value for the grade.
"""
import base64
import hashlib
import math
import numbers

from .._i18n import say
from ._core import CheckFailure

__all__ = ["check_choice", "check_number", "quiz_key", "seal_why"]


def _digest(text: str) -> str:
    return hashlib.sha256(f"attention-course-quiz:{text}".encode()).hexdigest()[:12]


def _canonical(answer, decimals: int | None) -> str:
    if decimals is not None:
        return f"{round(float(answer), decimals):.{decimals}f}"
    return str(answer).strip().lower()


def quiz_key(answer, decimals: int | None = None, qid: str | None = None) -> str:
    """The digest that a quiz cell's ``key=`` holds for ``answer`` (authors run this once).

    ``qid`` names the question (e.g. ``"03.q1"``: chapter and question); it salts the digest, so
    the same letter gives a different key in every question. A letter:
    ``quiz_key("b", qid="03.q1")``. A number, compared after rounding:
    ``quiz_key(0.25, decimals=2, qid="00.q2")``.
    """
    text = _canonical(answer, decimals)
    return _digest(f"{qid}:{text}" if qid is not None else text)


SEALED = "sealed:"


def _stream(answer, decimals: int | None, qid: str | None, n: int) -> bytes:
    seed = hashlib.sha256(f"attention-course-why:{qid}:{_canonical(answer, decimals)}".encode()).digest()
    out = b""
    counter = 0
    while len(out) < n:
        out += hashlib.sha256(seed + counter.to_bytes(8, "big")).digest()
        counter += 1
    return out[:n]


def seal_why(text: str, answer, decimals: int | None = None, qid: str | None = None) -> str:
    """The ``why=`` an author writes in a quiz cell: ``text`` sealed with the right ``answer``
    (authors run this once, like :func:`quiz_key`). A check opens it only with the right answer."""
    data = text.encode()
    mixed = bytes(a ^ b for a, b in zip(data, _stream(answer, decimals, qid, len(data))))
    return SEALED + base64.b64encode(hashlib.sha256(data).digest()[:4] + mixed).decode()


def open_why(why: str | None, answer, decimals: int | None = None, qid: str | None = None) -> str | None:
    """The explanation: ``why`` as written, or unsealed with ``answer`` (None if it does not open)."""
    if not why or not why.startswith(SEALED):
        return why
    try:
        raw = base64.b64decode(why[len(SEALED):])
    except ValueError:
        return None
    tag, mixed = raw[:4], raw[4:]
    data = bytes(a ^ b for a, b in zip(mixed, _stream(answer, decimals, qid, len(mixed))))
    if hashlib.sha256(data).digest()[:4] != tag:
        return None
    return data.decode(errors="replace")


def _why_shown(why: str | None, answer, decimals: int | None, qid: str | None) -> str | None:
    """The explanation in the learner's language: in the Chinese edition the Chinese one, sealed
    with the same answer (``utils/data/whys_zh.json``, from ``i18n/zh/whys.po``); else ``why``."""
    from .._i18n import language, sealed_why

    if qid and language() != "en":
        local = open_why(sealed_why(qid, language()), answer, decimals, qid=qid)
        if local:
            return local
    return open_why(why, answer, decimals, qid=qid)


def _verdict(right: bool, shown: str, why: str | None, hint: str | None) -> None:
    if right:
        say(f"✅ Right: {shown}." + (f" {why}" if why else ""))
        return
    raise CheckFailure(
        f"Not quite: {shown} is not the answer." + (f" A hint: {hint}" if hint else " Think it through again.")
    )


def check_choice(answer, choices: str = "abcd", key: str | None = None, why: str | None = None,
                 hint: str | None = None, qid: str | None = None) -> None:
    """The answer to a multiple-choice question: one letter from ``choices``, e.g. "b".

    With ``key`` (``quiz_key(letter, qid=qid)`` of the right letter) it says at once whether the
    answer is right. ``why``: the explanation, shown only with a right answer. ``hint``: shown with
    a wrong answer; it points at the idea to revisit and never states the answer.
    """
    if answer is None or answer is ...:
        raise CheckFailure(f"Set your answer to one of {', '.join(repr(c) for c in choices)}.")
    if not isinstance(answer, str) or answer.strip().lower() not in set(choices):
        raise CheckFailure(
            f"The answer should be one letter out of {', '.join(repr(c) for c in choices)}; got {answer!r}."
        )
    letter = answer.strip().lower()
    if key is None:
        say(f"Answer recorded: {letter!r} (graded when you submit).")
        return
    right = quiz_key(letter, qid=qid) == key
    _verdict(right, repr(letter), _why_shown(why, letter, None, qid) if right else None, hint)


def check_number(answer, key: str | None = None, decimals: int = 2, why: str | None = None,
                 hint: str | None = None, qid: str | None = None) -> None:
    """The answer to a numeric question: an int or a float (an expression such as ``math.log(2)``
    is fine: its value is what counts).

    With ``key`` (``quiz_key(value, decimals, qid=qid)``) it says at once whether the answer,
    rounded to ``decimals`` places, is right; ``why`` and ``hint`` as in :func:`check_choice`.
    """
    if answer is None or answer is ...:
        raise CheckFailure("Set your answer to a number (a literal, or an expression that evaluates to one).")
    if isinstance(answer, bool) or not isinstance(answer, numbers.Real):
        raise CheckFailure(f"The answer should be a number (int or float); got {answer!r}.")
    if not math.isfinite(float(answer)):
        raise CheckFailure(f"The answer should be a finite number; got {answer!r}.")
    if key is None:
        say(f"Answer recorded: {answer!r} (graded when you submit).")
        return
    right = quiz_key(answer, decimals, qid=qid) == key
    _verdict(right, f"{answer!r}", _why_shown(why, answer, decimals, qid) if right else None, hint)
