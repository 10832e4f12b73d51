"""The check itself: run an answer on an exercise's cases, judge each, and say why it fails.

``run_check(exercise, impl)`` raises :class:`CheckFailure` (an ``AssertionError``, so nbgrader
scores it zero) with one clear message, or prints one line such as
``✅ scaled_dot_product_attention: 17 visible cases passed``. ``judge_case`` and
``expected_output`` are what the grader uses too, outside the learner's kernel.

The machinery lives in modules named for their concerns, all re-exported here:

* ``_model`` — the case model (``Exercise``, ``Case``, ``Mutant``, ``Variant``, building modules,
  gradients, seeds);
* ``_contract`` — the declaration of each exercise's rules, and their renderings (the stub's
  docstring, the prompt's rules block);
* ``_guards`` — what the core enforces from the declaration on every exercise (inputs never
  modified, output dtype, no state between calls, dropout) and the adversarial cases it adds;
* ``_tripwires`` — forbidden calls and budgets (memory, time, work) while learner code runs;
* ``_compare`` — comparing outputs; ``_diagnose`` — naming the mistake.

``tests/test_checks.py`` proves that every check passes its reference and its variants, fails the
stub, rejects every mutant and names it; ``tests/test_contracts.py`` that every declared rule is
rendered and enforced.
"""
from __future__ import annotations

import traceback
import warnings
from typing import Callable

import torch

from .._i18n import say
from .._clock import Deadline, DispatchMode, cpu_alarm  # noqa: F401
from .._guard import ForbiddenCall, _learner_depth, learner_is_running, reference  # noqa: F401
from ._adversarial import _DISABLED
from ._contract import Contract
from ._guards import dtype_message, explain_crash, judge_again, judge_guards, split
from ._compare import _apart, _fmt_idx, compare, describe, name_paths  # noqa: F401
from ._diagnose import *  # noqa: F401,F403
from ._diagnose import (CLUE_PREFIX, DIAGNOSIS_SECONDS, GENERIC_SECONDS, SHARE_PREFIX, _Crashed,  # noqa: F401
                        _crash_message, _float_clues, _mask_clues, _same_as, case_features, diagnose,
                        generic_diagnoses, output_clues, shared_features)
from ._model import *  # noqa: F401,F403
from ._model import (DEFAULT_SECONDS, Case, CheckFailure, Exercise, Mutant, Variant, _detach,  # noqa: F401
                     _input_names, _tensors, build_module, layout_judge, parameter_layout, case_seed, default_budget, forward_and_grads,
                     generator, load_state_strict, loss_weights, randn, random_padding_mask, reseed, rng,
                     run_function, run_module, shape_label, tolerance)
from ._tripwires import *  # noqa: F401,F403
from ._tripwires import (Budget, BudgetExceeded, Forbidden, WorkCounter, _Limits, _Tripwire, _alarm,  # noqa: F401
                         largest_tensor, learner_code, patched_entry, warm_up)


def validate_impl(exercise: Exercise, impl) -> None:
    what = "class" if exercise.kind == "class" else "function"
    if impl is None:
        raise CheckFailure(
            f"`{exercise.name}` is None: pass your {what} itself, e.g. check_{exercise.name}({exercise.name}), "
            "after running the cell that defines it."
        )
    if isinstance(impl, (torch.Tensor, tuple, list, dict, int, float, str)):
        raise CheckFailure(
            f"check_{exercise.name} takes your {what} `{exercise.name}`, not its result "
            f"({describe(impl)}): write check_{exercise.name}({exercise.name}) without calling it."
        )
    if exercise.kind == "class":
        if not (isinstance(impl, type) and issubclass(impl, nn.Module)):
            raise CheckFailure(
                f"`{exercise.name}` should be a class that subclasses nn.Module; got {describe(impl)}."
            )
    elif not callable(impl):
        raise CheckFailure(f"`{exercise.name}` should be a function; got {describe(impl)}.")


def _guard_for(exercise: Exercise, case: Case) -> Callable:
    budget = exercise.case_budget(case)
    return lambda: learner_code(exercise.forbidden, budget)


def _call_learner(exercise: Exercise, impl, case: Case):
    return exercise.call(impl, case, guard=_guard_for(exercise, case))


def _forbidden_message(exercise: Exercise, err: ForbiddenCall) -> str:
    if err.label == "utils.reference":
        return (
            f"{exercise.name} calls utils.reference.{err.func_name}: the exercise is to write it "
            "yourself, so a call to the reference scores zero."
        )
    return (
        f"{exercise.name} calls {err.label} (seen: {err.func_name}), which this exercise's rules forbid: "
        "a call to it scores zero, so write that computation yourself."
    )




def _where_in_learner_code(err: BaseException) -> str:
    """' (line N: `code`)' for the innermost frame of the learner's own code, if any."""
    frames = traceback.extract_tb(err.__traceback__)
    mine = [f for f in frames if "/utils/" not in f.filename and "/torch/" not in f.filename
            and "/site-packages/" not in f.filename and "/lib/python" not in f.filename]
    if not mine:
        return ""
    f = mine[-1]
    code = f" `{f.line.strip()}`" if f.line else ""
    return f" (at line {f.lineno}:{code})"


def judge_case(exercise: Exercise, case: Case, expected, got) -> str | None:
    """The verdict on one case: None when right, else one sentence (the grader uses this too).

    ``got`` is what ``Exercise.call`` returned: the output, and what the guards observed (the
    inputs after the call, a second call's output), held against the declaration here: inputs
    never modified, the output compared (or judged), its dtype, no state between calls."""
    out, obs = split(got)
    contract = exercise.contract if isinstance(exercise.contract, Contract) else None
    msg = judge_guards(exercise, case, out, obs) if obs else None
    if msg:
        return msg
    if case.judge is not None:
        try:
            return case.judge(out)
        except Exception as err:  # noqa: BLE001 - a malformed output the judge could not read
            return f"the output could not be judged ({type(err).__name__}: {err}); got {describe(out)}."
    msg = compare(expected, out, *tolerance(exercise, case))
    if msg is None and contract is not None and contract.same_dtype and "dtype" not in _DISABLED:
        msg = dtype_message(exercise, case, expected, out)
    return msg or (judge_again(exercise, case, out, obs, tolerance(exercise, case)) if obs else None)


def expected_output(exercise: Exercise, case: Case, i: int):
    """The reference's output on case ``i`` (None for a judged case)."""
    if case.judge is not None:
        return None
    from .._guard import unguarded

    with torch.random.fork_rng():
        reseed(case_seed(i))
        return exercise.call(unguarded(exercise.reference), case, observe=False)


SKIPPED = object()  # evaluate's output for a probe it did not run


def _is_probe(exercise: Exercise, case: Case) -> bool:
    """A case whose budget declares a memory cap (``Budget.memory``): the rule at a size where
    breaking it takes gigabytes. Its budget may come from the case or from the exercise."""
    budget = exercise.case_budget(case)
    return budget is not None and budget.memory is not None


def evaluate(exercise: Exercise, impl, cases: list) -> tuple[list, list, list]:
    """Run ``impl`` on every case: (outputs, per-case error message or None, expected).

    A case on which the learner's code raises gets a _Crashed output and a message; the other
    cases still run, so the diagnosis can use them. A forbidden call, or a stub that is not
    implemented, stops the check at once.
    """
    outputs, errors, expected = [], [], []
    for i, case in enumerate(cases):
        if _is_probe(exercise, case) and any(errors):
            expected.append(None)
            # A probe (the rule at a size where breaking it takes gigabytes) runs only for an answer
            # that has passed every case before it: one that already failed would only fill the
            # learner's memory here. Left out of the count and the diagnosis (``_run_check``).
            outputs.append(SKIPPED)
            errors.append(None)
            continue
        exp = expected_output(exercise, case, i)
        expected.append(exp)
        try:
            reseed(case_seed(i))
            got = _call_learner(exercise, impl, case)
        except ForbiddenCall as err:
            raise CheckFailure(_forbidden_message(exercise, err)) from None
        except NotImplementedError:
            raise CheckFailure(
                f"{exercise.name} is not implemented yet: replace `raise NotImplementedError()` with your code."
            ) from None
        except BudgetExceeded as err:
            outputs.append(_Crashed(f"over budget: {err}"))
            errors.append(f"{exercise.name} is over its budget on this case: {err}.")
            continue
        except CheckFailure as err:  # a runner's own verdict on this case
            outputs.append(_Crashed(_crash_message(err)))
            errors.append(str(err))
            continue
        except Exception as err:  # the learner's bug: say which case and where, go on
            outputs.append(_Crashed(_crash_message(err)))
            errors.append(f"{exercise.name} raised {type(err).__name__}{_where_in_learner_code(err)}: {err}"
                          f"{explain_crash(exercise, err)}")
            continue
        outputs.append(split(got)[0])
        errors.append(judge_case(exercise, case, exp, got))
    return outputs, errors, expected




def run_check(exercise: Exercise, impl, seed: int | None = None, quiet: bool = False) -> int:
    """Check ``impl`` against the reference on the exercise's cases; see the module docstring."""
    __tracebackhide__ = True
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny tensors: one thread is faster, and steady on a busy machine
    try:
        with warnings.catch_warnings():
            # A warning printed to stderr inside a test cell makes nbgrader score the cell zero.
            warnings.simplefilter("ignore")
            return _run_check(exercise, impl, seed, quiet)
    finally:
        torch.set_num_threads(threads)


def _run_check(exercise: Exercise, impl, seed: int | None, quiet: bool) -> int:
    __tracebackhide__ = True
    validate_impl(exercise, impl)
    warm_up()
    seed = exercise.default_seed if seed is None else seed
    with torch.random.fork_rng():
        reseed(seed)
        cases = exercise.make_cases(seed)
        outputs, errors, expected = evaluate(exercise, impl, cases)
        ran = [i for i, o in enumerate(outputs) if o is not SKIPPED]
        if len(ran) < len(cases):
            cases, outputs, errors, expected = ([xs[i] for i in ran] for xs in (cases, outputs, errors, expected))
        failed = [i for i, e in enumerate(errors) if e]
        if failed:
            first = failed[0]
            crashed = sum(isinstance(outputs[i], _Crashed) for i in failed)
            lines = [
                f"{exercise.name}: {len(failed)} of {len(cases)} cases failed"
                + (f" ({crashed} raised an error)" if crashed else "") + ".",
                f"First failing case: {cases[first].label}",
                "  " + name_paths(exercise, errors[first]),
            ]
            # The diagnoses compare every case with the bank's mistakes: not on a probe's inputs
            # (thousands of positions: minutes of work and hundreds of MiB for nothing they add).
            keep = [i for i, c in enumerate(cases) if not _is_probe(exercise, c)]
            d_cases, d_outputs, d_expected, d_errors = ([xs[i] for i in keep] for xs in (cases, outputs, expected, errors))
            hints = []
            if not any(m.hint in errors[first] for m in exercise.mutants):  # not named yet
                for hint in diagnose(exercise, d_cases, d_outputs, d_expected):
                    if hint not in errors[first]:
                        lines.append(f"Likely mistake: {hint}")
                        hints.append(hint)
            named = bool(hints) or any(m.hint in errors[first] for m in exercise.mutants)
            if not named and exercise.locate is not None:
                where = exercise.locate(exercise, impl, d_cases, d_outputs, d_expected, d_errors)
                if where:
                    lines.append(f"Where: {where}")
            # Generic diagnoses come after the bank's hints and never replace them: when a known
            # mistake is named, only the (factual) features the failing cases share are added.
            lines += generic_diagnoses(exercise, d_cases, d_outputs, d_expected, d_errors, clues=not named)
            raise CheckFailure("\n".join(lines))
        for extra in exercise.extra_checks:
            try:
                with learner_code(exercise.forbidden):
                    extra(impl)
            except ForbiddenCall as err:
                raise CheckFailure(_forbidden_message(exercise, err)) from None
    n = len(cases) + len(exercise.extra_checks)
    if not quiet:
        say(f"✅ {exercise.name}: {n} visible cases passed. Grading runs more cases, on new random inputs.")
        for tip in exercise.tips:
            try:
                text = tip(impl)
            except Exception:  # noqa: BLE001 - a tip never fails the check
                text = None
            if text:
                print(f"Tip (not graded): {text}")
    return n




def make_check(exercise: Exercise) -> Callable:
    """The learner-facing ``check_<name>(impl, seed=None)``."""

    def check(impl=None, seed: int | None = None) -> None:
        __tracebackhide__ = True  # IPython and pytest show the message, not the harness
        run_check(exercise, impl, seed=seed)  # returns None: nbgrader reads a result as partial credit

    check.__name__ = f"check_{exercise.name}"
    check.__qualname__ = check.__name__
    check.__doc__ = (
        f"Check your `{exercise.name}` against the reference on random cases.\n\n"
        "Raises AssertionError with the first failing case, the largest error and, when it "
        "recognises it, the likely mistake; prints one line when every case passes."
    )
    check.exercise = exercise
    return check
