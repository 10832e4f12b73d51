"""Reference implementations of every graded exercise: ``utils.reference.<exercise name>``.

The most readable correct version of each, with the course conventions: q (..., S_q, D),
k (..., S_k, D), v (..., S_k, D_v); masks are bool with True = may attend; a fully masked row
gives zero weights and a zero output; functions that return weights return (output, weights).
Learner code may not call these: inside a check they raise, and the grade for the exercise is zero.
"""
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
