"""Chapter 05's correct answer that builds its parameters with ``setattr`` (see ch03_top_level.py)."""
from __future__ import annotations

from .ch03_top_level import SELF_ATTENTION_SETATTR
from .ch05_mistakes import ASSIGNMENT, FULL, _with_answers  # noqa: F401 (ASSIGNMENT: discovery)

SAMPLES = {
    "ch05_other_styles_setattr": ("SelfAttention with setattr-built parameters, a tuple constant and a helper at "
                                  "the top of its cell (full marks)",
                                  lambda: _with_answers(SelfAttention=SELF_ATTENTION_SETATTR), FULL),
}
