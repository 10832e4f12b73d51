"""Machine-made mutants of the course's references, run through their checks (issue 24, items 4 and 5).

* :mod:`.operators`: the mutation operators, made for tensor code (another dim, a dropped
  transpose, off-by-one masks and slices, in-place variants, another fill value, p ↔ 1 − p, ...);
* :mod:`.scope`: which code an exercise's reference is made of (the function or class, the methods
  the exercise calls, the helpers of ``utils`` it calls), and the mutants of that code;
* :mod:`.build`: a mutant as an implementation (the mutated module executed afresh, unguarded);
* :mod:`.worker`: one mutant through its check (killed, survived, stillborn), the message read,
  and for a survivor the search for a difference (equivalence probe); runs in a sandboxed process;
* :mod:`.pool`: worker processes with a time limit per mutant;
* :mod:`.report`: the registry of equivalents, the known survivors, the report (markdown, JSON).

``python tools/mutate.py --help`` (or ``make mutants``) runs the whole.
"""
