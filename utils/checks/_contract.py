"""One declaration per exercise: its contract, from which the prompt's rules and the stub's docstring
are rendered, and which the core enforces.

A :class:`Contract` holds

* ``doc`` — the docstring's own text: the summary line, the signature and shapes, what it computes
  (a line ``name: (dims)`` also tells the core which dims of an argument are S_q, S_k, S);
* typed rules, each with exactly one renderer (``Rule.doc`` for the stub's docstring,
  ``Rule.prompt`` for the prompt's rules block) and exactly one enforcer (``Rule.enforcer``, the
  name of what holds it, listed in ``ENFORCERS``):

  - ``Forbid(*groups)`` — what a from-scratch exercise may not call (the tripwires);
  - ``Gradients(of)`` — gradients compared in float64 (the exercise's ``grad`` cases, and one the
    core adds at large |x|);
  - ``Dropout(...)`` — p is the probability of *dropping*, kept values × 1/(1 − p) exactly (judged
    at p = 0, a small and a large p);
  - ``Cost(...)`` — the largest tensor and the work allowed, at the sizes they are measured (at
    least two);
  - ``Pure()`` — inputs (values, shape, strides, storage offset; lists, dicts; a module's
    parameters) are never modified;
  - ``Fresh()`` — the output never shares memory with an input (``Contract.fresh``);
  - ``SameDtype()`` — the output has the floating inputs' dtype (the course-wide default);
  - ``Stateless()`` — a second call with the same inputs and random state gives the same result;
  - ``Adversarial(kinds)`` — the inputs the core derives from the kinds of the arguments (stated,
    so that no input surprises a correct answer).

``Contract.docstring()`` and ``Contract.rules_block(name)`` are the two renderings;
``tools/render_contracts.py --write`` writes them into the solution notebooks, and
``tests/test_contracts.py`` fails when a notebook's text differs from what its declaration renders.
"""
from __future__ import annotations

import inspect
import re
import textwrap
from dataclasses import dataclass, field
from typing import Callable

WIDTH = 96  # the docstring's lines (inside a 4-space indent: under 100 characters)


def _wrap(text: str, indent: str = "", first: str = "") -> str:
    return textwrap.fill(text, WIDTH, initial_indent=first or indent, subsequent_indent=indent + "    ")


# ----------------------------------------------------------------------------------------------
# Rule kinds: one renderer pair (doc, prompt) and one enforcer each
# ----------------------------------------------------------------------------------------------
class Rule:
    """A typed rule of a contract. ``doc`` and ``prompt`` render it; ``enforcer`` names what holds it."""

    enforcer = ""

    def doc(self, contract: "Contract") -> str:  # pragma: no cover - every kind overrides it
        raise NotImplementedError

    def prompt(self, contract: "Contract") -> str:  # pragma: no cover
        raise NotImplementedError


@dataclass
class Forbid(Rule):
    """Calls a from-scratch exercise may not make (``utils.checks._forbid`` groups)."""

    groups: tuple = ()
    enforcer = "_tripwires.learner_code (Exercise.forbidden)"

    def __init__(self, *groups):
        self.groups = tuple(groups)

    def labels(self) -> str:
        return "; ".join(g.label for g in self.groups)

    def doc(self, contract):
        return _wrap(f"Not allowed (a call scores zero): {self.labels()}.")

    def prompt(self, contract):
        return (f"**Not allowed:** {'; '.join(f'`{g.label}`' for g in self.groups)} — the check detects a call "
                "(also through `torch.ops.aten` or with torch-function handling switched off) and the exercise "
                "scores zero. The matching `utils.reference` function is not allowed either.")


@dataclass
class Gradients(Rule):
    """Gradients of a fixed random loss are compared, in float64 (``of``: with respect to what)."""

    of: str = "every floating-point input"
    enforcer = "_model.forward_and_grads (Case.grad) and _adversarial (large |x|)"

    def doc(self, contract):
        also = ", also at large |x|" if "grad_large" in contract.adversarial else ""
        return _wrap(f"Gradients are compared too (float64, for {self.of}){also}: build new "
                     "tensors rather than editing in place a tensor autograd needs.")

    def prompt(self, contract):
        where = (", including at large magnitudes (|scores| past exp's range)" if "large" in contract.adversarial
                 else ", including at large |x|" if "grad_large" in contract.adversarial else "")
        return (f"**Gradients:** the check also compares the gradients of a random "
                f"loss in float64, for {self.of}{where}. "
                "Build new tensors (`torch.where`, `masked_fill`) rather than editing in place a tensor autograd "
                "needs, and keep every step visible to autograd.")


@dataclass
class Dropout(Rule):
    """Dropout with probability ``p`` of *dropping*; kept values multiplied by exactly 1/(1 − p).

    ``arg``: the keyword argument that carries p (a function), or ``ctor``: the constructor keyword
    (a module, in training mode: ``model.train()``). ``on``: what is dropped ("each attention weight").
    ``probe(p, seed) -> Case``: inputs on which the dropped values can be read from the output;
    ``values(case, out) -> tensor``: the dropped values read from an output (the learner's, or the
    reference's without dropout); ``consistent(case, out) -> message | None``: what else the output
    must satisfy (out == weights @ v). ``hints``: sentences naming the usual slips (keys: ignored,
    keep_probability, not_rescaled, rescaled_by_1_over_p, renormalised).
    """

    on: str = "each attention weight"
    what: str = "weights"  # what the messages call the dropped values
    arg: str | None = None
    ctor: str | None = None
    probe: Callable | None = None
    values: Callable | None = None
    consistent: Callable | None = None
    hints: dict = field(default_factory=dict)
    ps: tuple = (0.1, 0.8)
    enforcer = "_guards.dropout_cases (judged probes at p = 0, 0.1, 0.8; backward at 0.8)"

    @property
    def name(self) -> str:
        return self.arg or self.ctor or "p"

    def doc(self, contract):
        p = self.name
        mode = "" if self.arg else ", in training mode only (model.train())"
        return _wrap(f"{p} is the probability of dropping (zeroing) {self.on}{mode}, not of keeping it; the kept "
                     f"ones are multiplied by exactly 1/(1 - {p}). Judged at {p} = 0, "
                     f"{' and '.join(f'{x:g}' for x in self.ps)}, and trained through (backward) at {self.ps[-1]:g}.")

    def prompt(self, contract):
        p = self.name
        mode = "" if self.arg else " in training mode only (`model.train()`; `model.eval()` turns it off)"
        return (f"**Dropout:** `{p}` is the probability of *dropping* (zeroing) {self.on}{mode} — not of keeping "
                f"it — and every kept value is multiplied by exactly `1/(1 - {p})` (what `F.dropout` and `nn.Dropout` "
                f"do). The check runs `{p}` = 0, {' and '.join(f'{x:g}' for x in self.ps)}: the share dropped must be "
                f"within statistical bounds of `{p}`, and the kept values exactly rescaled. Training through it must "
                f"work: the check also runs backward at `{p}` = {self.ps[-1]:g} (no `inplace=True` dropout on a tensor "
                "autograd saved, such as a softmax's or a ReLU's output).")


PROBE_SECONDS = 10.0  # CPU time per call at a probe (3 s at the other sizes): a loop over its queries fits


@dataclass
class Cost(Rule):
    """Memory (and work) budget, measured at ``sizes`` (at least two).

    ``sizes``: dicts of the parameters the builder takes (``{"S": 256}``), rendered as "S = 256";
    ``build(**size) -> Case``: the case at one size; ``numel(**size)``: the largest tensor allowed,
    stated as ``numel_text``; ``work(**size)`` and ``work_text``: the multiply-adds allowed, or None;
    ``why``: the sentence the failure message gives. ``variants``: extra keyword sets the builder is
    called with at every size (``({"causal": False}, {"causal": True})``).
    """

    sizes: tuple = ()
    build: Callable | None = None
    numel: Callable | None = None
    numel_text: str = ""
    work: Callable | None = None
    work_text: str = ""
    why: str = ""
    setting: str = ""
    variants: tuple = ({},)
    tol: tuple | None = None
    # One more size, the probe: measured like the others, and in the grader's re-check the operating
    # system also refuses the exercise's process more than ``probe_bytes(**probe)`` bytes of memory
    # (``Budget.memory``), stated as ``probe_text``. Chosen so that breaking the rule there needs
    # several times that (the S×S scores in float32 are 4·S² bytes), and the reference a small part.
    probe: dict | None = None
    probe_bytes: Callable | None = None
    probe_text: str = ""
    probe_variants: tuple | None = None  # the variants measured at the probe (default: all of them)
    enforcer = ("_tripwires.learner_code (Case.budget: numel, work, seconds) on the budget cases; at the probe, "
                "also RLIMIT_AS in the re-check's process (grader/_verify_child.py, Budget.memory)")

    def all_sizes(self) -> tuple:
        return tuple(self.sizes) + ((self.probe,) if self.probe else ())

    def at(self) -> str:
        def one(size):
            return ", ".join(f"{k} = {v:,}" if isinstance(v, int) else f"{k} = {v}" for k, v in size.items())
        parts = [f"({one(s)})" if len(s) > 1 else one(s) for s in self.all_sizes()]
        return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]

    def probe_sentence(self) -> str:
        if not self.probe:
            return ""
        one = ", ".join(f"{k} = {v:,}" if isinstance(v, int) and not isinstance(v, bool) else f"{k} = {v}"
                        for k, v in {**self.probe, **(self.probe_variants[0] if self.probe_variants and
                                                      len(self.probe_variants) == 1 else {})}.items())
        return (f" At {one} a call may take up to {PROBE_SECONDS:g} s of CPU time, and the grader's re-check caps "
                f"the memory your code can obtain at {self.probe_text}, enforced by the operating system.")

    def limits(self) -> str:
        text = f"no tensor above {self.numel_text} elements" if self.numel_text else ""
        if self.work_text:
            text += ("; " if text else "") + f"at most {self.work_text} multiply-adds (matmuls, einsums, elementwise *)"
        return text

    def doc(self, contract):
        where = f" ({self.setting})" if self.setting else ""
        return _wrap(f"Budget, measured at {self.at()}{where}: {self.limits()}.{self.probe_sentence()}")

    def prompt(self, contract):
        where = f" ({self.setting})" if self.setting else ""
        return f"**Budget**, measured at {self.at()}{where}: {self.limits()} — {self.why}.{self.probe_sentence()}"


@dataclass
class Pure(Rule):
    """Inputs are never modified: values, shape, strides, storage offset; lists and dicts; the
    parameters of a module; what a function argument (``score_fn``) returns."""

    enforcer = "_guards.observe / _guards.judge_guards (the inputs after every call; _guards.Watched)"

    def doc(self, contract):
        return "inputs never modified"

    def prompt(self, contract):
        fns = sorted(set(re.findall(r"\b(\w+_fn)\(", contract.text())))  # function arguments: score_fn(...)
        also = (f" What {' and '.join(f'`{f}`' for f in fns)} returns is the caller's too: never modified "
                "either (it may be cached, or saved by autograd)." if fns else "")
        return ("**Inputs are never modified:** after every call the check compares each argument with what it "
                "passed — a tensor's values, shape, strides and storage offset, a list's or dict's items, a "
                "module's parameters. `x.mul_(...)`, `x *= ...`, `x[...] = ...`, `x.unsqueeze_(...)`, "
                "`inplace=True` on an argument, or `list.reverse()` on the caller's list, all fail." + also)


@dataclass
class Fresh(Rule):
    """The output is a new tensor: it never shares memory with an input (not the input itself, nor a
    view of it), even where its values equal the input's."""

    enforcer = "_guards.observation (__shares__) / _guards.judge_guards"

    def doc(self, contract):
        return "the output is a new tensor (never an input or a view of one)"

    def prompt(self, contract):
        return ("**A new output:** the output never shares memory with an input — not the input itself nor a view "
                "of it, even where nothing changes (a rotation by 0): the caller may later edit one without the "
                "other.")


@dataclass
class SameDtype(Rule):
    """The output has the dtype of the floating inputs (float64 in, float64 out): the course-wide default."""

    enforcer = "_guards.dtype_message in judge_case (float64 cases included)"

    def doc(self, contract):
        return "output in the floating inputs' dtype"

    def prompt(self, contract):
        return ("**Output dtype:** the dtype of the floating-point inputs (the course's convention): float32 in, "
                "float32 out; float64 in, float64 out. Computing in float64 inside is fine; convert back.")


@dataclass
class Stateless(Rule):
    """Called again with the same inputs and random state, after a call on other inputs, it gives the
    same result."""

    enforcer = "_guards.observe (a second call) / _guards.judge_guards"

    def doc(self, contract):
        return "no state between calls"

    def prompt(self, contract):
        return ("**No state between calls:** called again with the same inputs (and the same random state), "
                "after a call on other inputs, it gives the same result; nothing is cached or accumulated from "
                "one call to the next (on the function, the module or a default argument).")


@dataclass
class Defaults(Rule):
    """The signature's defaults are part of the contract: each defaulted argument that a case passes
    at its default is also left out once, and compared with the reference called the same way."""

    enforcer = "_adversarial.defaults_cases"

    def doc(self, contract):
        return ""  # the signature in the docstring states the defaults

    def prompt(self, contract):
        return ("**Defaults:** a default value in the signature is part of the contract: the check also calls "
                "your code with defaulted arguments left out (e.g. `dim`, `dropout`), and compares with the "
                "reference called the same way.")


# The adversarial kinds the core derives from the arguments' kinds (``_adversarial.KINDS``).
ADVERSARIAL_TEXT = {
    "large": "magnitudes past exp's range (|scores| ≈ 10³ in float32, past 709 in float64)",
    "below_fill": ("scores far below any finite fill value (≈ −10¹⁰): mask scores, or start a running max, with `-inf` "
                   "or the dtype's lowest value, not −1e9"),
    "masked_max": "a masked key holding the largest score by more than any float's range",
    "zero_vectors": "zero vectors among the real keys and queries",
    "ties": "tied scores",
    "fully_masked": "fully masked rows",
    "single": "S = 1",
    "cross": "S_q < S_k and S_q > S_k",
    "non_contiguous": "non-contiguous inputs (transposed, expanded)",
    "float64": "float64 inputs",
    "grad_large": "float64 gradients at large |x|",
}


@dataclass
class Adversarial(Rule):
    """The adversarial inputs the core derives for this exercise (filled in by the core)."""

    kinds: tuple = ()
    enforcer = "_adversarial.adversarial_cases"

    def doc(self, contract):
        return ""  # stated in the prompt's rules block only: the docstring says what to compute

    def prompt(self, contract):
        def text(k):
            if k == "below_fill" and not contract.fills:  # nothing to fill and no running max: the fact only
                return ADVERSARIAL_TEXT[k].split(":")[0]
            return ADVERSARIAL_TEXT[k]

        return ("**Inputs the check also uses:** " + "; ".join(text(k) for k in self.kinds)
                + ". Each is a valid input of the contract above.")


ENFORCERS = {kind: kind.enforcer for kind in (Forbid, Gradients, Dropout, Cost, Pure, Fresh, SameDtype, Stateless,
                                              Defaults, Adversarial)}


# ----------------------------------------------------------------------------------------------
# The declaration
# ----------------------------------------------------------------------------------------------
@dataclass
class Contract:
    """An exercise's declaration. ``doc``: the docstring's own text (summary line first). The typed
    rules: ``forbid``, ``grad``, ``dropout``, ``budgets``, and the defaults ``pure``, ``same_dtype``,
    ``stateless`` (False where the exercise keeps state or the rule does not apply, e.g. no floating
    input). ``kinds``: {argument: kind} for the adversarial inputs (kinds: scores, query, key, value,
    mask, tokens; names q/k/v/query/key(s)/value(s)/mask are inferred); ``off``: {adversarial kind:
    why it does not apply}. ``scores(case) -> tensor``: the scores a case produces, for exercises
    whose scores the core cannot compute from q and k (modules)."""

    doc: str
    forbid: tuple = ()
    grad: str | None = None
    dropout: Dropout | None = None
    budgets: tuple = ()
    pure: bool = True
    same_dtype: bool = True
    stateless: bool = True
    fresh: bool = False  # the output never shares memory with an input (Fresh)
    kinds: dict = field(default_factory=dict)
    off: dict = field(default_factory=dict)
    scores: Callable | None = None
    shapes: dict = field(default_factory=dict)  # {argument: [dims]} where doc has no ``name: (dims)`` line
    adversarial: tuple = ()  # filled by the core: the kinds it derives cases for
    fills: bool | None = None  # masks scores or keeps a running max (the fill advice applies); None: inferred

    def rules(self) -> list:
        out = []
        if self.dropout is not None:
            out.append(self.dropout)
        out += list(self.budgets)
        if self.forbid:
            out.append(Forbid(*self.forbid))
        if self.grad is not None:
            out.append(Gradients(self.grad))
        if self.pure:
            out.append(Pure())
        if self.fresh:
            out.append(Fresh())
        if self.same_dtype:
            out.append(SameDtype())
        if self.stateless:
            out.append(Stateless())
        out.append(Defaults())
        if self.adversarial:
            out.append(Adversarial(tuple(self.adversarial)))
        return out

    def text(self) -> str:
        return inspect.cleandoc(self.doc)

    def docstring(self) -> str:
        """The stub's docstring: the declaration's text, then one line (or a few) per typed rule."""
        lines = [self.text(), ""]
        simple = [r for r in self.rules() if isinstance(r, (Pure, Fresh, SameDtype, Stateless))]
        for r in self.rules():
            if not isinstance(r, (Pure, Fresh, SameDtype, Stateless)) and r.doc(self):
                lines.append(r.doc(self))
        if simple:
            lines.append(_wrap("Also checked: " + "; ".join(r.doc(self) for r in simple) + "."))
        return "\n".join(lines).rstrip()

    def rules_block(self, name: str) -> str:
        """The prompt's rules block (markdown), between the markers the renderer looks for."""
        items = "\n".join(f"- {r.prompt(self)}" for r in self.rules())
        return (f"{BEGIN.format(name=name)}\n**What the check enforces** (generated from the exercise's declaration; "
                f"an answer that meets these rules and the contract above gets full marks):\n\n{items}\n{END}")

    def dims(self) -> dict:
        """{argument: [dim names]} from the ``name: (dims)`` lines of ``doc`` ("q: (..., S_q, d_k)")."""
        found = {}
        for m in re.finditer(r"(?<![\w.])([A-Za-z_]\w*(?:, [A-Za-z_]\w*)*): (?:[a-z]+, )?(?:[a-z]+ )?"
                             r"(?:broadcastable to )?\(([^()]*)\)", self.text()):
            dims = [d.strip() for d in m.group(2).split(",")]
            for name in m.group(1).split(", "):
                found.setdefault(name, dims)
        return {**found, **self.shapes}


def raises_somewhere(obj) -> bool | None:
    """Whether the code of a function or class has a ``raise`` or an ``assert`` (None: no source to
    read). The validation tips use it instead of calling the learner's code on inputs the contract
    excludes: such a call may crash, hang, or print from C code (LAPACK's "On entry to DLASCL ...
    illegal value") into a graded cell."""
    import ast

    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(obj)))
    except (OSError, TypeError, SyntaxError, IndentationError):
        return None
    return any(isinstance(node, (ast.Raise, ast.Assert)) for node in ast.walk(tree))


BEGIN = "<!-- rules: {name} (generated by tools/render_contracts.py from utils/checks: do not edit) -->"
END = "<!-- /rules -->"
