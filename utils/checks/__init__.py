"""Learner-facing checks: ``check_<exercise name>(your_function_or_class)``.

Each check runs your code against ``utils.reference`` on seeded random cases (S_q ≠ S_k, S = 1,
odd sizes, batch and head dims, masks with fully masked rows, large inputs). On failure it raises
AssertionError naming the case, the shapes, the largest error and where, and the likely mistake
when your output matches a known one. On success it prints one line: the number of visible cases
passed (grading runs more, on new random inputs). ``uses(fn)`` at the top of a section says
whether the learner's function it relies on passes its check.
"""
from ._core import CheckFailure  # noqa: F401
from ._registry import EXERCISES, uses  # noqa: F401
from ._quiz import *  # noqa: F401,F403
from ._ch00 import *  # noqa: F401,F403
from ._ch01 import *  # noqa: F401,F403
from ._ch02 import *  # noqa: F401,F403
from ._ch03 import *  # noqa: F401,F403
from ._ch04 import *  # noqa: F401,F403
from ._ch05 import *  # noqa: F401,F403
from ._ch06 import *  # noqa: F401,F403
from ._ch07 import *  # noqa: F401,F403
from ._ch08 import *  # noqa: F401,F403
from ._ch09 import *  # noqa: F401,F403
from ._ch10 import *  # noqa: F401,F403
from ._ch11 import *  # noqa: F401,F403
from ._ch12 import *  # noqa: F401,F403
from ._ch13 import *  # noqa: F401,F403
from ._ch14 import *  # noqa: F401,F403
from ._ch15 import *  # noqa: F401,F403
