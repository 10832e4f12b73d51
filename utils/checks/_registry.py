"""Every exercise registers here, so tests and the grader can iterate over the whole course."""
import io
import contextlib

from .._i18n import say
from ._core import CheckFailure, Exercise, make_check, run_check

EXERCISES: dict = {}


def register(exercise: Exercise):
    """Add ``exercise`` to the course registry and return its learner-facing check function."""
    if exercise.name in EXERCISES:
        raise ValueError(f"exercise {exercise.name!r} registered twice")
    EXERCISES[exercise.name] = exercise
    return make_check(exercise)


def uses(*impls) -> None:
    """Say, at the top of a section, whether the learner's functions it uses pass their checks.

    ``uses(scaled_dot_product_attention)`` runs the check quietly (its visible cases) and prints
    one line per function: ✅ when it passes, ⚠️ with the first line of the verdict when it does
    not (the section then runs on a function known to be wrong). Never raises; returns None
    (a notebook would otherwise display the value).
    """
    for impl in impls:
        name = getattr(impl, "__name__", None)
        exercise = EXERCISES.get(name)
        if exercise is None:
            print(f"ℹ️ this section uses {name or impl!r}, which has no check.")
            continue
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                run_check(exercise, impl, quiet=True)
        except CheckFailure as err:
            first = str(err).splitlines()
            detail = first[0] if first else "it fails its check"
            if len(first) > 1 and first[0].startswith(exercise.name):
                detail = first[0][len(exercise.name) + 2:]
            say(f"⚠️ this section uses your `{name}`, which does not pass its check yet ({detail}). "
                  "What follows is computed with it and may be wrong: fix it and run this section again.")
        else:
            say(f"✅ this section uses your `{name}`, which passes its check.")
