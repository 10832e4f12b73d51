"""Diagnosis: naming the mistake behind a failing answer.

First the bank's mutants (``diagnose``: a mutant whose outputs match the learner's where both ran
names the mistake), then a wrong scale factor (``rescale``), then what needs no mutant
(``generic_diagnoses``: clues about the outputs, and what the failing cases share).
"""
from __future__ import annotations

import inspect
import math
import time
import warnings

import torch

from ._compare import compare, name_paths
from ._model import Case, _input_names, case_seed, reseed, tolerance
from ._tripwires import _Tripwire

DIAGNOSIS_SECONDS = 1.5  # time the diagnosis may take to name a mistake


class _Crashed:
    """Stands for the output of a case on which the learner's code raised."""

    def __init__(self, message: str):
        self.message = message


def _same_as(exercise, impl, cases: list, outputs: list, expected: list) -> bool:
    """True when ``impl`` (a mutant) matches the learner on every case where both ran (or where
    both raised the same error), and the mistake shows on at least one of them."""
    shown = False
    with torch.random.fork_rng():
        for i, (c, out) in enumerate(zip(cases, outputs)):
            if c.judge is not None:
                continue
            try:
                reseed(case_seed(i))
                with warnings.catch_warnings(), _Tripwire((), exercise.case_budget(c)):
                    warnings.simplefilter("ignore")
                    m = exercise.call(impl, c, observe=False)
            except Exception as err:  # noqa: BLE001 - the mutant cannot run this case
                if isinstance(out, _Crashed) and out.message == _crash_message(err):
                    shown = True  # the same error as the learner's: evidence for this mistake
                    continue
                if isinstance(out, _Crashed):
                    continue
                continue
            if isinstance(out, _Crashed):
                continue  # the mutant ran where the learner's code raised: no evidence either way
            if compare(m, out, *tolerance(exercise, c)) is not None:
                return False
            if compare(expected[i], m, *tolerance(exercise, c)) is not None:
                shown = True
    return shown


def _crash_message(err: BaseException) -> str:
    text = str(err).split("Hint:")[0].strip()  # autograd appends a long hint that may vary
    return f"{type(err).__name__}: {text}"


def diagnose(exercise, cases: list, outputs: list, expected: list | None = None) -> list[str]:
    """Hints for the known mistakes whose outputs match the learner's where both ran."""
    if expected is None:
        from ._core import expected_output

        expected = [expected_output(exercise, c, i) for i, c in enumerate(cases)]
    hints = []
    # CPU time of this process (all its threads): a busy machine slows the diagnosis down but does
    # not cut it short, so the same mistake is named on a laptop, in CI and in the grader.
    deadline = time.process_time() + DIAGNOSIS_SECONDS
    for mutant in exercise.mutants:
        if time.process_time() > deadline:  # a failing check answers within about 2 s of CPU
            break
        if _same_as(exercise, mutant.impl, cases, outputs, expected):
            hints.append(mutant.hint)
    if not hints and exercise.rescale is not None:
        hint = _diagnose_scale(exercise, cases, outputs, expected)
        if hint:
            hints.append(hint)
    budget_notes = [o.message for o in outputs if isinstance(o, _Crashed) and o.message.startswith("over budget")]
    if budget_notes and not hints:
        hints.append(budget_notes[0][len("over budget: "):])
    return hints


def _best_factor(exercise, case: Case, i: int, got) -> float | None:
    """The factor c for which the reference on ``rescale(case, c)`` matches ``got``, if any."""
    from .._guard import unguarded

    ref = unguarded(exercise.reference)

    def err(logc: float) -> float:
        with torch.random.fork_rng():
            reseed(case_seed(i))
            out = exercise.call(ref, exercise.rescale(case, math.exp(logc)), observe=False)
        return _max_abs_diff(out, got)

    grid = [x / 8.0 for x in range(-48, 49)]  # c from e^-6 to e^6
    errs = [err(x) for x in grid]
    k = min(range(len(grid)), key=errs.__getitem__)
    lo, hi = grid[max(k - 1, 0)], grid[min(k + 1, len(grid) - 1)]
    # Golden-section refinement: each step keeps one of its two points, so it costs one reference
    # call; 48 steps narrow the bracket of log c (width 0.25) to about 1e-11.
    g = (math.sqrt(5) - 1) / 2
    m1, m2 = hi - g * (hi - lo), lo + g * (hi - lo)
    e1, e2 = err(m1), err(m2)
    for _ in range(48):
        if e1 < e2:
            hi, m2, e2 = m2, m1, e1
            m1 = hi - g * (hi - lo)
            e1 = err(m1)
        else:
            lo, m1, e1 = m1, m2, e2
            m2 = lo + g * (hi - lo)
            e2 = err(m2)
    logc = (lo + hi) / 2
    with torch.random.fork_rng():
        reseed(case_seed(i))
        out = exercise.call(ref, exercise.rescale(case, math.exp(logc)), observe=False)
    if compare(out, got, *(x * 10 for x in tolerance(exercise, case))) is None and abs(logc) > 1e-3:
        return math.exp(logc)
    return None


def _max_abs_diff(a, b) -> float:
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.shape == b.shape:
        d = (a.detach().double() - b.detach().double()).abs().nan_to_num(nan=1e9, posinf=1e9, neginf=1e9)
        return float(d.max()) if d.numel() else 0.0
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)) and len(a) == len(b):
        return max((_max_abs_diff(x, y) for x, y in zip(a, b)), default=0.0)
    if isinstance(a, dict) and isinstance(b, dict):
        return max((_max_abs_diff(a[k], b.get(k)) for k in a), default=0.0)
    return 1e9


def _diagnose_scale(exercise, cases: list, outputs: list, expected: list) -> str | None:
    """'the scores were scaled by the wrong factor': the reference with another scale matches."""
    found = []
    for i, (case, out) in enumerate(zip(cases, outputs)):
        if isinstance(out, _Crashed) or case.judge is not None or case.grad:
            continue
        if compare(expected[i], out, *tolerance(exercise, case)) is None:
            continue  # this case does not show the mistake (e.g. S_k = 1)
        c = _best_factor(exercise, case, i, out)
        if c is None:
            return None
        found.append((i, case, c))
        if len(found) == 3:
            break
    if not found:
        return None
    i, case, c = found[0]
    if exercise.scale_names is None:
        return (f"the scores were scaled by the wrong factor: your output equals the reference's with the "
                f"scores multiplied by an extra {c:.4g} (case [{case.label}]).")
    names = exercise.scale_names(case)
    right_name, right = next(iter(names.items()))
    used = c * right
    match = None
    for name, value in list(names.items())[1:]:
        if all(abs(cc * next(iter(exercise.scale_names(cs).values())) - exercise.scale_names(cs)[name])
               <= 0.02 * abs(exercise.scale_names(cs)[name]) for _, cs, cc in found):
            match = name
            break
    said = f"{match} = {used:.4g}" if match else f"{used:.4g}"
    return (f"the scores were scaled by the wrong factor: your output equals the reference's with the scores "
            f"multiplied by {said} instead of {right_name} = {right:.4g} (case [{case.label}]).")


# ----------------------------------------------------------------------------------------------
# Generic diagnoses: what a failing answer's outputs and cases show, with no mutant
# ----------------------------------------------------------------------------------------------
CLUE_PREFIX = "Clue: "
SHARE_PREFIX = "What the failing cases share: "
GENERIC_SECONDS = 0.3  # CPU time the output clues may take, after the bank's diagnosis
LARGE_INPUT = 10.0  # |x| above this is "large" (randn inputs stay below ~5)
_Q_NAMES = ("q", "query", "queries", "x", "tgt", "target")
_K_NAMES = ("k", "key", "keys", "memory", "context", "kv", "src", "source")


def _named_inputs(exercise, case: Case) -> list:
    """[(name, value)] of a case's call arguments, keyword arguments and constructor arguments."""
    pairs = list(zip(_input_names(exercise, len(case.args)), case.args)) + list(case.kwargs.items())
    ctor, ctor_kwargs = case.init.get("ctor", ()), case.init.get("ctor_kwargs", {})
    if exercise.kind == "class" and (ctor or ctor_kwargs):
        try:
            names = [p for p in inspect.signature(exercise.reference.__init__).parameters if p != "self"]
        except (TypeError, ValueError):
            names = []
        names += [f"ctor{i}" for i in range(len(names), len(ctor))]
        pairs += list(zip(names, ctor)) + list(ctor_kwargs.items())
    return pairs


def _fully_masked(mask: torch.Tensor) -> bool:
    if mask.dim() == 0 or mask.shape[-1] == 0:
        return False
    if mask.dtype == torch.bool:
        return bool((~mask).all(-1).any())
    if mask.is_floating_point():
        return bool(torch.isneginf(mask).all(-1).any())
    return False


def case_features(exercise, case: Case) -> dict:
    """What a case is made of, derived from its arguments: ``{phrase: value}``.

    Booleans read "all failing cases have <phrase>" (False: "have no <phrase>", or the text after a
    "¦" in the phrase); other values read "<phrase> = <value>". ``Exercise.features(case)`` may add
    or override entries.
    """
    feats: dict = {"gradients compared (float64)¦forward outputs compared only": bool(case.grad)}
    pairs = _named_inputs(exercise, case)
    tensors = [(n, t) for n, t in pairs if isinstance(t, torch.Tensor)]
    floats = [(n, t) for n, t in tensors if t.is_floating_point()]
    q = next(((n, t) for n, t in floats if n.lower() in _Q_NAMES and t.dim() >= 2), None)
    k = next(((n, t) for n, t in floats if n.lower() in _K_NAMES and t.dim() >= 2), None)
    if q is not None and k is not None:
        feats["S_q ≠ S_k¦S_q = S_k"] = q[1].shape[-2] != k[1].shape[-2]
    if q is not None and q[1].dim() >= 3:
        feats[f"a single position ({q[0]}.shape[-2] = 1)¦several positions ({q[0]}.shape[-2] > 1)"] = \
            q[1].shape[-2] == 1
    for n, t in tensors:
        if "mask" in n.lower() or t.dtype == torch.bool:
            feats[f"a {n}" if "mask" in n.lower() else f"a mask ({n})"] = True
            feats[f"a fully masked row in {n}"] = _fully_masked(t)
    for n, v in pairs:
        if v is None and "mask" in n.lower():
            feats[f"a {n}"] = False
    if floats:
        name, first = floats[0]
        feats[f"the number of dims of {name}"] = first.dim()
        feats[f"the dtype of {name}"] = str(first.dtype).replace("torch.", "")
        big = max((float(t.detach().abs().max()) for _, t in floats if t.numel()), default=0.0)
        feats[f"large inputs (|x| > {LARGE_INPUT:g})¦inputs with |x| ≤ {LARGE_INPUT:g}"] = big > LARGE_INPUT
    for n, v in pairs:
        if isinstance(v, (bool, int, str)) or (isinstance(v, float) and math.isfinite(v)):
            feats[n] = (v,)  # a 1-tuple: an argument's value, read "n = v"
    if getattr(exercise, "features", None) is not None:
        try:
            feats.update(exercise.features(case))
        except Exception:  # noqa: BLE001 - a chapter's hook never breaks a verdict
            pass
    return feats


def _say_values(phrase: str, values: set, failing: bool) -> str:
    if all(isinstance(v, bool) for v in values):
        pos, _, neg = phrase.partition("¦")
        if not neg:
            neg = (pos.replace(" = ", " ≠ ", 1) if " = " in pos else f"no {pos[2:]}" if pos.startswith("a ")
                   else f"no {pos}")
        if len(values) == 2:
            return f"have {pos} or {neg}"
        return f"have {pos if True in values else neg}"
    plain = sorted((v[0] if isinstance(v, tuple) else v for v in values), key=lambda v: (str(type(v)), v))
    shown = ", ".join(repr(v) if isinstance(v, str) else f"{v:g}" if isinstance(v, float) else str(v) for v in plain)
    if phrase.startswith("the dtype of "):
        return f"have {phrase[len('the dtype of '):]} in {shown.replace(', ', ' or ')}".replace("'", "")
    if phrase.startswith("the number of dims of "):
        return f"have {phrase[len('the number of dims of '):]} with {shown.replace(', ', ' or ')} dims"
    return f"have {phrase} = {shown}" if len(values) == 1 else f"have {phrase} in {{{shown}}}"


def shared_features(exercise, cases: list, failed: list) -> str | None:
    """One sentence: a feature whose values in the failing cases never occur in the passing ones.

    Only with at least 2 failing and 2 passing cases; features taking a different value in almost
    every case (random sizes) are not used.
    """
    if len(failed) < 2 or len(cases) - len(failed) < 2:
        return None
    feats = [case_features(exercise, c) for c in cases]
    keys = []
    for f in feats:
        keys += [k for k in f if k not in keys]
    found = []
    for order, key in enumerate(keys):
        boolean = any(isinstance(f.get(key), bool) for f in feats)
        values = [f.get(key, False if boolean else None) for f in feats]
        known = [i for i, v in enumerate(values) if v is not None]
        distinct = {values[i] for i in known}
        if len(distinct) < 2 or (len(distinct) > 3 and len(distinct) > len(known) // 3):
            continue
        bad = [i for i in failed if values[i] is not None]
        good = [i for i in known if i not in failed]
        if len(bad) < len(failed) or len(good) < 2:  # said of every failing case, and of 2+ passing ones
            continue
        bad_values, good_values = {values[i] for i in bad}, {values[i] for i in good}
        if bad_values & good_values:
            continue
        found.append((len(distinct), order, key, bad_values, good_values, len(good)))
    if not found:
        return None
    _, _, key, bad, good, n_good = min(found, key=lambda f: f[:2])
    every = "both failing cases" if len(failed) == 2 else f"all {len(failed)} failing cases"
    return (f"{every} {_say_values(key, bad, True)}; the {n_good} passing ones "
            f"{_say_values(key, good, False)}.")


def _leaves(expected, got, path: str = "output"):
    """(path, expected tensor or scalar, got) for the leaves of an output structure."""
    if isinstance(expected, (torch.Tensor, int, float)) and not isinstance(expected, bool):
        yield path, expected, got
    elif isinstance(expected, dict) and isinstance(got, dict):
        for key, e in expected.items():
            if key in got and not isinstance(e, str):
                yield from _leaves(e, got[key], key if path == "output" else f"{path}[{key!r}]")
    elif isinstance(expected, (tuple, list)) and isinstance(got, (tuple, list)) and len(got) == len(expected):
        for i, (e, g) in enumerate(zip(expected, got)):
            yield from _leaves(e, g, f"{path}[{i}]")


def _close(a: torch.Tensor, b: torch.Tensor, atol: float, rtol: float) -> bool:
    if a.shape != b.shape:
        return False
    a, b = a.double(), b.double()
    if not (bool(torch.isfinite(a).all()) and bool(torch.isfinite(b).all())):
        return bool(((a == b) | ((a - b).abs() <= atol + rtol * b.abs())).all())
    return bool(((a - b).abs() <= atol + rtol * b.abs()).all())


def _nice_number(c: float) -> str:
    """c, and a simple form of it when there is one (2, 1/4, √8, 1/√8)."""
    text = f"{c:.4g}"
    if abs(c - round(c)) <= 1e-6 * abs(c):
        return text
    for k in range(10, 41):  # binary units: 2^20 (MiB), 2^30 (GiB)
        if abs(abs(c) - 2.0 ** -k) <= 1e-6 * 2.0 ** -k:
            return f"{text} (= {'−' if c < 0 else ''}1/2^{k})"
    for k in range(2, 257):
        for value, name in ((k, f"{k}"), (1 / k, f"1/{k}"), (math.sqrt(k), f"√{k}"), (1 / math.sqrt(k), f"1/√{k}")):
            if abs(abs(c) - value) <= 1e-6 * value and not (name == text):
                return f"{text} (= {'−' if c < 0 else ''}{name})"
    return text


def _slice_permutation(e: torch.Tensor, g: torch.Tensor, dim: int, atol: float, rtol: float):
    """The permutation p with g.select(dim, i) ≈ e.select(dim, p[i]) (None if none, or identity)."""
    n = e.shape[dim]
    if n < 2 or n > 32:
        return None
    es = [e.select(dim, j) for j in range(n)]
    for a in range(n):  # the expected slices must be told apart
        for b in range(a + 1, n):
            if _close(es[a], es[b], atol, rtol):
                return None
    perm, used = [], set()
    for i in range(n):
        gi = g.select(dim, i)
        j = next((j for j in range(n) if j not in used and _close(es[j], gi, atol, rtol)), None)
        if j is None:
            return None
        perm.append(j)
        used.add(j)
    return None if perm == list(range(n)) else perm


def _say_perm(perm: list) -> str:
    n = len(perm)
    if perm == list(range(n))[::-1]:
        return "in reverse order"
    for s in range(1, n):
        if perm == [(i + s) % n for i in range(n)]:
            return f"rolled by {n - s} (your slice i is the expected slice i + {s}, cyclically)"
    return f"in another order (your slices are the expected ones {perm})"


def _float_clues(e: torch.Tensor, g: torch.Tensor, path: str, atol: float, rtol: float) -> list:
    """[(kind, message)]: what a wrong floating-point output is, relative to the expected one."""
    clues = []
    if e.numel() == 0:
        return clues
    ed, gd = e.detach().double(), g.detach().double()
    finite = bool(torch.isfinite(ed).all())
    if g.shape != e.shape:
        if not finite:
            return clues
        if e.dim() >= 2 and tuple(g.shape) == tuple(e.mT.shape) and _close(ed.mT, gd, atol, rtol):
            return [("transposed", f"your {path} is the expected one transposed in its last two dims "
                                   f"(shape {tuple(g.shape)} instead of {tuple(e.shape)}).")]
        if e.dim() <= 5:
            import itertools

            for p in itertools.permutations(range(e.dim())):
                if tuple(e.shape[i] for i in p) == tuple(g.shape) and list(p) != list(range(e.dim())) \
                        and _close(ed.permute(p), gd, atol, rtol):
                    return [("dims permuted", f"your {path} holds the expected values with its dims in another "
                             f"order: shape {tuple(g.shape)} instead of {tuple(e.shape)} (your dims are the "
                             f"expected dims {list(p)}): a transpose or permute is missing or extra.")]
        if g.dim() == e.dim() - 1 or (g.dim() == e.dim() and sum(a != b for a, b in zip(g.shape, e.shape)) == 1):
            for d in range(e.dim()):
                rest = tuple(e.shape[:d]) + tuple(e.shape[d + 1:])
                if tuple(g.shape) not in (rest, tuple(e.shape[:d]) + (1,) + tuple(e.shape[d + 1:])) or e.shape[d] < 2:
                    continue
                for how, r in (("averaged", ed.mean(d)), ("summed", ed.sum(d)), ("taken at index 0", ed.select(d, 0)),
                               ("taken at the last index", ed.select(d, -1))):
                    if _close(r.reshape(g.shape), gd, atol, rtol) and float(r.max() - r.min()) > atol:
                        return [(f"reduced over dim {d - e.dim()}",
                                 f"your {path} (shape {tuple(g.shape)}) is the expected one {how} over dim "
                                 f"{d - e.dim()} (size {e.shape[d]}, shape {tuple(e.shape)}): keep that dim.")]
        if g.numel() != e.numel():
            return clues
        if _close(ed.reshape(g.shape), gd, atol, rtol):
            return [("reshaped", f"your {path} holds the expected values in the expected order, but with shape "
                                 f"{tuple(g.shape)} instead of {tuple(e.shape)}{_why_reshaped(e, g)}.")]
        return clues
    if not finite or not bool(torch.isfinite(gd).all()):
        return clues
    err = (gd - ed).abs()
    scale = float(ed.abs().max())
    if e.dtype == torch.float64 and scale > 0:
        rel = float(err.max()) / scale
        if 2e-9 <= rel <= 3e-6:  # float32 rounding (eps 6e-8), far above float64's (1e-16)
            kind = "float32 output" if g.dtype == torch.float32 else "float32 precision"
            what = "is float32" if g.dtype == torch.float32 else "has float32 precision"
            clues.append((kind, f"your {path} {what} (error ~{rel:.0e} relative) in a float64 case: a tensor "
                                "created inside without dtype=... (or a .float()) is float32; keep the inputs' dtype."))
            return clues
    if scale == 0:
        return clues
    if float(gd.abs().max()) == 0:
        return [("zeros", f"your {path} is all zeros.")]
    if e.dim() >= 2 and e.shape[-1] == e.shape[-2] and _close(ed.mT, gd, atol, rtol):
        return [("transposed", f"your {path} is the expected one transposed in its last two dims.")]
    # a probability distribution over the last dim, normalised over another dim
    sums = ed.sum(-1)
    if e.shape[-1] >= 2 and float(ed.min()) >= -atol and bool((((sums - 1).abs() < 1e-3) | (sums.abs() < 1e-6)).all()) \
            and bool(((sums - 1).abs() < 1e-3).any()):
        rows = (sums - 1).abs() < 1e-3
        gsums = gd.sum(-1)
        if not bool(((gsums - 1).abs() < 1e-3)[rows].all()) and float(gd.min()) >= -atol:
            others = [d for d in range(e.dim() - 1) if e.shape[d] >= 2
                      and bool(((gd.sum(d) - 1).abs() < 1e-3).all())]
            if others:
                d = others[-1]
                clues.append(("normalised over another dim",
                              f"your {path} sums to 1 over dim {d - e.dim()} (size {e.shape[d]}); the expected one sums "
                              f"to 1 over the last dim (size {e.shape[-1]}): the softmax or normalisation is over the "
                              "wrong dim."))
            else:
                lo, hi = float(gsums[rows].min()), float(gsums[rows].max())
                sums_to = f"{lo:.4g}" if f"{lo:.4g}" == f"{hi:.4g}" else f"{lo:.4g} … {hi:.4g}"
                clues.append(("rows do not sum to 1",
                              f"the rows of your {path} (over the last dim) sum to {sums_to}; the expected "
                              "rows sum to 1 (a distribution over the last dim)."))
    # a constant factor or offset, for the whole tensor or per row
    c = float((gd * ed).sum() / (ed * ed).sum())
    if abs(c - 1) > 1e-3 and abs(c) > 1e-6 and _close(c * ed, gd, atol, rtol):  # not "times 1e-15": that is zero
        return [(f"constant factor={c!r}={path}", f"your {path} is the expected one times {_nice_number(c)} everywhere.")]
    shift = float((gd - ed).mean())
    if abs(shift) > atol and _close(ed + shift, gd, atol, rtol) and float((ed + shift - gd).abs().max()) <= 0.1 * float(err.max()):
        clues.append((f"constant offset={shift!r}={path}", f"your {path} is the expected one plus {shift:.4g} everywhere."))
        return clues
    if e.dim() >= 1 and e.shape[-1] >= 2 and e.numel() > e.shape[-1]:
        num, den = (gd * ed).sum(-1, keepdim=True), (ed * ed).sum(-1, keepdim=True)
        r = torch.where(den > 0, num / den.clamp_min(1e-300), torch.ones_like(den))
        before = float(err.max())  # a per-row fit must explain the error, not tuck it under the tolerance
        if _close(r * ed, gd, atol, rtol) and float((r - 1).abs().max()) > 1e-3 and float(r.abs().min()) > 1e-6 \
                and float((r * ed - gd).abs().max()) <= 0.1 * before:  # (a factor of ~0 is not a normalisation)
            clues = [c for c in clues if c[0] != "rows do not sum to 1"]  # the factor says more
            clues.append(("factor per row", f"each row (over the last dim) of your {path} is the expected row times its "
                          f"own factor ({float(r.min()):.4g} … {float(r.max()):.4g}): a missing or wrong normalisation "
                          "of each row."))
            return clues
        d = (gd - ed).mean(-1, keepdim=True)
        if _close(ed + d, gd, atol, rtol) and float(d.abs().max()) > atol \
                and float((ed + d - gd).abs().max()) <= 0.1 * before:
            clues.append(("offset per row", f"each row (over the last dim) of your {path} is the expected row plus its "
                          f"own constant ({float(d.min()):.4g} … {float(d.max()):.4g})."))
            return clues
    # the expected values in other positions
    for dim in range(e.dim() - 1):
        perm = _slice_permutation(ed, gd, dim, atol, rtol)
        if perm is not None:
            clues.append((f"permuted along dim {dim - e.dim()}",
                          f"your {path} has the expected slices along dim {dim - e.dim()} (size {e.shape[dim]}) "
                          f"{_say_perm(perm)}: heads, positions or batch entries are mixed up."))
            return clues
    m = e.shape[-1] if e.dim() else 0
    for n in range(2, min(m, 32) + 1):  # the coarsest blocks first; n == m: single features
        if m % n:
            continue
        shape = tuple(e.shape[:-1]) + (n, m // n)
        perm = _slice_permutation(ed.reshape(shape), gd.reshape(shape), e.dim() - 1, atol, rtol)
        if perm is not None:
            what = f"{n} blocks of {m // n}" if n < m else f"{m} features"
            clues.append(("blocks permuted", f"the last dim of your {path} holds the expected {what} "
                          f"{_say_perm(perm)}: heads (or concatenated parts) in another order."))
            return clues
    if e.numel() >= 4:
        es, gs = ed.flatten().sort().values, gd.flatten().sort().values
        distinct = len(set(round(v, 6) for v in es.tolist()))
        if distinct >= 0.5 * e.numel() and _close(es, gs, atol, rtol):
            clues.append(("values moved", f"your {path} holds exactly the expected values, in other positions: a "
                          "reshape or view mixes dims (e.g. heads merged or split without the transpose)."))
    return clues


def _offsets(m: torch.Tensor):
    """The set of offsets j − i allowed in every (S_q, S_k) slice of a Toeplitz bool mask, or None."""
    sq, sk = m.shape[-2], m.shape[-1]
    flat = m.reshape(-1, sq, sk)
    allowed = None
    for s in flat:
        here = set()
        for o in range(-(sq - 1), sk):
            d = torch.diagonal(s, offset=o)
            if bool(d.any()) != bool(d.all()):
                return None
            if bool(d.all()):
                here.add(o)
        if allowed is None:
            allowed = here
        elif here != allowed:
            return None
    return allowed


def _say_offsets(offsets: set) -> str:
    if not offsets:
        return "none"
    runs, items = [], sorted(offsets)
    start = prev = items[0]
    for o in items[1:] + [None]:
        if o is not None and o == prev + 1:
            prev = o
            continue
        runs.append(f"{start}" if start == prev else f"{start} … {prev}")
        if o is not None:
            start = prev = o
    return ", ".join(runs).replace("-", "−")


def _why_reshaped(e: torch.Tensor, g: torch.Tensor) -> str:
    if [n for n in e.shape if n != 1] == [n for n in g.shape if n != 1]:
        return " (a dim of size 1 kept or dropped: keepdim, squeeze or unsqueeze)"
    return ": reshape it"


def _reshape_clue(e: torch.Tensor, g: torch.Tensor, path: str) -> list:
    if g.numel() != e.numel() or g.dtype != e.dtype or e.numel() < 2:
        return []
    if bool((e.reshape(g.shape) == g).all()):
        return [("reshaped", f"your {path} holds the expected values in the expected order, but with shape "
                             f"{tuple(g.shape)} instead of {tuple(e.shape)}{_why_reshaped(e, g)}.")]
    return []


def _mask_clues(e: torch.Tensor, g: torch.Tensor, path: str) -> list:
    if g.dtype != torch.bool or e.numel() == 0:
        return _reshape_clue(e, g, path) if g.shape != e.shape else []
    if e.dim() >= 2 and tuple(g.shape) == tuple(e.mT.shape) and bool((e.mT == g).all()) and not bool((e.mT == e).all()):
        return [("transposed", f"your {path} is the expected one transposed in its last two dims.")]
    if g.shape != e.shape:
        return _reshape_clue(e, g, path)
    if bool((g == ~e).all()):
        return [("negated mask", f"your {path} is the exact negation of the expected one (True and False swapped).")]
    if e.dim() >= 2 and e.shape[-1] >= 2 and e.shape[-2] >= 2:
        oe, og = _offsets(e), _offsets(g)
        if oe is not None and og is not None:
            edge = ""
            if oe and og and (len(og ^ oe) == 1 or (min(og) - min(oe) in (-1, 1) and max(og) == max(oe))
                             or (max(og) - max(oe) in (-1, 1) and min(og) == min(oe))):
                edge = ": an edge of the band or diagonal is off by one"
            return [("mask offsets", f"your {path} allows the key offsets j − i in {{{_say_offsets(og)}}}; the expected "
                                     f"one allows {{{_say_offsets(oe)}}}{edge}.")]
    # every row a prefix (True then False) or a suffix: its boundary moved
    for flip in (False, True):
        ee, gg = (e.flip(-1), g.flip(-1)) if flip else (e, g)
        ce, cg = ee.sum(-1), gg.sum(-1)
        prefix = lambda m, c: bool((m == (torch.arange(m.shape[-1]) < c.unsqueeze(-1))).all())  # noqa: E731
        if prefix(ee, ce) and prefix(gg, cg):
            diff = (cg - ce).unique().tolist()
            if len(diff) == 1 and diff[0] != 0:
                k = int(diff[0])
                return [("boundary moved", f"every row of your {path} has {abs(k)} {'more' if k > 0 else 'fewer'} True "
                                           f"position{'s' if abs(k) > 1 else ''} than expected: its boundary is off by "
                                           f"{abs(k)} (< versus <=, or a length off by one).")]
    for dim in range(e.dim()):
        if e.shape[dim] < 3:
            continue
        for s in (1, -1):
            body = e.narrow(dim, 0, e.shape[dim] - 1) if s == 1 else e.narrow(dim, 1, e.shape[dim] - 1)
            edge_e = e.narrow(dim, 0, 1) if s == 1 else e.narrow(dim, e.shape[dim] - 1, 1)
            for fill in (edge_e, torch.zeros_like(edge_e), torch.ones_like(edge_e)):
                shifted = torch.cat([fill, body], dim) if s == 1 else torch.cat([body, fill], dim)
                if bool((shifted == g).all()):
                    return [("shifted", f"your {path} is the expected one shifted by one position along dim "
                                        f"{dim - e.dim()} (towards {'higher' if s == 1 else 'lower'} indices): an off-by-one.")]
    return []


def _scalar_clue(e, g, path: str, atol: float, rtol: float) -> list:
    try:
        ev, gv = float(e), float(g)
    except (TypeError, ValueError, RuntimeError):
        return []
    if not (math.isfinite(ev) and math.isfinite(gv)) or abs(gv - ev) <= atol + rtol * abs(ev):
        return []
    clues = [(f"constant offset={gv - ev!r}={path}", f"your {path} is the expected value plus {gv - ev:.4g}.")]
    if ev != 0:
        clues.append((f"constant factor={gv / ev!r}={path}", f"your {path} is the expected value times {_nice_number(gv / ev)}."))
    return clues


def _size_forms(exercise, case: Case) -> dict:
    """{(form, name, dim): value} for the sizes of a case's tensors: n, 1/n, √n, 1/√n."""
    forms = {}
    for name, t in _named_inputs(exercise, case):
        if isinstance(t, int) and not isinstance(t, bool) and t >= 2:
            sizes = [(name, t)]
        elif isinstance(t, torch.Tensor):
            sizes = [(f"{name}.shape[{d}]", t.shape[d]) for d in range(-t.dim(), 0) if t.shape[d] >= 2]
        else:
            continue
        for what, n in sizes:
            for form, value in (("{}", n), ("1/{}", 1 / n), ("√({})", math.sqrt(n)), ("1/√({})", 1 / math.sqrt(n))):
                forms[(form, what)] = value
    return forms


def _merge_constants(exercise, cases: list, per_kind: dict) -> None:
    """Join the constant factors (offsets) of one output found in several cases: the same value,
    or a value that follows one size of the inputs (√D), or values that change with the case."""
    groups: dict = {}
    for kind in [k for k in per_kind if k.startswith(("constant factor=", "constant offset=")) or k.endswith(" (scalar)")]:
        scalar = kind.endswith(" (scalar)")
        what, value, path = kind.removesuffix(" (scalar)").split("=", 2)
        for i, msg in per_kind.pop(kind):
            groups.setdefault((what, path), []).append((i, float(value), msg, scalar))
    for (what, path), hits in groups.items():
        values = [v for _, v, _, _ in hits]
        if len(hits) == 1 and hits[0][3]:
            continue  # a single number is always the expected one times something
        if all(abs(v - values[0]) <= 1e-3 * max(abs(values[0]), 1e-12) for v in values):
            i, _, msg, _ = hits[0]
            per_kind[f"{what} {values[0]:.4g} {path}"] = [(i, msg) for i, _, msg, _ in hits]
            continue
        op = "times" if what == "constant factor" else "plus"
        shared = None
        if what == "constant factor":
            common = None
            for i, v, _, _ in hits:
                here = {k for k, x in _size_forms(exercise, cases[i]).items() if abs(x - v) <= 1e-3 * abs(v)}
                common = here if common is None else common & here
            if common:
                shared = sorted(common, key=lambda k: (len(k[0]), k[1]))[0]
        examples = "; ".join(f"{_nice_number(v) if what == 'constant factor' else f'{v:.4g}'} in [{cases[i].label}]"
                             for i, v, _, _ in hits[:2])
        if shared is not None:
            form, what_size = shared
            msg = f"your {path} is the expected one {op} {form.format(what_size)} (e.g. {examples})."
        elif any(scalar for _, _, _, scalar in hits):
            continue  # a wrong number is always the expected one times (plus) something
        else:
            msg = f"your {path} is the expected one {op} a constant that changes from case to case ({examples})."
        per_kind[f"varying {what} {path}" if len(hits) > 1 else f"{what} {path}"] = [(hits[0][0], msg)] + \
            [(i, "") for i, _, _, _ in hits[1:]]


def output_clues(exercise, cases: list, outputs: list, expected: list, failed: list,
                 deadline: float | None = None) -> list[str]:
    """Sentences about what the failing outputs are, relative to the expected ones (no mutant)."""
    per_kind: dict = {}
    wrong_paths, right_paths, checked = set(), set(), 0
    for i in failed:
        out, case = outputs[i], cases[i]
        if isinstance(out, _Crashed) or case.judge is not None or expected[i] is None:
            continue
        if deadline is not None and time.process_time() > deadline:
            break
        checked += 1
        atol, rtol = tolerance(exercise, case)
        first = None
        for path, e, g in _leaves(expected[i], out):
            # "right in every case" is said of values (float or bool tensors), not of shapes or counts
            tensor = isinstance(e, torch.Tensor) and (e.is_floating_point() or e.dtype == torch.bool)
            if compare(e, g, atol, rtol, path) is None:
                if tensor:
                    right_paths.add(path)
                continue
            if tensor:
                wrong_paths.add(path)
            if first is None:
                first = (path, e, g)
        if first is None:
            continue
        path, e, g = first
        path = name_paths(exercise, path)
        try:
            if isinstance(e, torch.Tensor) and isinstance(g, torch.Tensor) and e.numel() > 1:
                if e.dtype == torch.bool:
                    found = _mask_clues(e, g, path)
                elif e.is_floating_point() and g.is_floating_point():
                    found = _float_clues(e, g, path, atol, rtol)
                else:
                    found = []
            elif isinstance(e, torch.Tensor) and isinstance(g, torch.Tensor) and e.shape != g.shape:
                found = _reshape_clue(e, g, path)
            else:
                found = [(k + " (scalar)", m) for k, m in _scalar_clue(e, g, path, atol, rtol)]
        except Exception:  # noqa: BLE001 - a diagnosis never breaks a verdict
            found = []
        for kind, msg in found:
            per_kind.setdefault(kind, []).append((i, msg))
    _merge_constants(exercise, cases, per_kind)
    lines = []
    ran = "" if checked == len(failed) else " compared with the reference output"
    # the clues seen in the most cases first, at most two
    for kind, hits in sorted(per_kind.items(), key=lambda kv: -len(kv[1]))[:2]:
        i, msg = hits[0]
        if len(hits) == checked and checked > 1:
            where = "in both failing cases" if checked == 2 else f"in all {checked} failing cases{ran}"
            if kind.startswith("varying "):
                where = ""
        elif len(hits) == 1:
            where = f"in case [{cases[i].label}]"
        else:
            where = f"in {len(hits)} of the {checked} failing cases{ran}, e.g. [{cases[i].label}]"
        text = f"{where}, {msg}" if where else msg
        lines.append(text[0].upper() + text[1:])
    grads = {p for p in wrong_paths if p.startswith("dL/d")}
    if checked and grads and grads == wrong_paths:
        right = sorted(p for p in right_paths if not p.startswith("dL/d"))
        zero = sorted(p for i in failed if isinstance(outputs[i], dict)
                      for p, v in outputs[i].items() if p in grads and isinstance(v, torch.Tensor)
                      and v.numel() and float(v.abs().max()) == 0)
        line = (f"your forward outputs are right in every failing case; only the gradients differ "
                f"({', '.join(sorted(grads))}): something between the inputs and the outputs is invisible to "
                "autograd or changed in place (.detach(), .data, .item(), numpy, torch.tensor(...) of a result, "
                "an in-place op).")
        nan = sorted(p for i in failed if isinstance(outputs[i], dict)
                     for p, v in outputs[i].items() if p in grads and isinstance(v, torch.Tensor)
                     and v.is_floating_point() and bool(torch.isnan(v).any()))
        if nan:  # not invisible to autograd: a step whose derivative is NaN at these inputs
            line = (f"your forward outputs are right in every failing case; only the gradients differ, and "
                    f"{', '.join(nan[:3])} {'has' if len(nan) == 1 else 'have'} NaN: some step's derivative is NaN or "
                    "infinite at these inputs even where its value is fine (exp of a masked -inf minus -inf, "
                    "sqrt or log at 0, a torch.where whose unused branch is NaN: autograd multiplies that "
                    "derivative by 0 and still gets NaN). Keep such values out of the computation rather than "
                    "masking them afterwards.")
        elif zero:
            line += f" {', '.join(zero[:3])} {'is' if len(zero) == 1 else 'are'} zero everywhere."
        lines.insert(0, line[0].upper() + line[1:])
    else:  # several outputs: say which are right (gradients aside)
        wrong = {name_paths(exercise, p) for p in wrong_paths if not p.startswith("dL/d")}
        right = {name_paths(exercise, p) for p in right_paths if not p.startswith("dL/d")} - wrong
        if checked and wrong and right and len(wrong | right) <= 4:
            named = lambda ps: ", ".join(sorted(ps))  # noqa: E731
            lines.append(f"{named(right)} {'is' if len(right) == 1 else 'are'} right in every case; only "
                         f"{named(wrong)} {'is' if len(wrong) == 1 else 'are'} wrong.")
    return lines


MAX_CLUES = 3  # Clue lines in one message


def _more_clues(exercise, cases: list, outputs: list, expected: list, errors: list, failed: list,
                said: list, impl=None) -> list[str]:
    """What ``_clues`` adds to the output clues: a transformation of the inputs or parameters that
    explains the output, where the differences lie, named sizes of a wrong shape, what an error
    means, and (given the learner's class) the first sub-module whose output differs."""
    from . import _clues

    explained = [ln for ln in said if " right in every case; only " not in ln and "only the gradients differ" not in ln]
    found: list = []

    def add(step) -> list:
        try:
            got = step() or []
        except Exception:  # noqa: BLE001 - a diagnosis never breaks a verdict
            got = []
        for ln in got:
            if ln and ln not in found:
                found.append(ln)
        return got

    if not explained:
        add(lambda: _clues.none_clues(exercise, cases, outputs, expected, failed)) or \
            add(lambda: _clues.factor_clues(exercise, cases, outputs, expected, failed)) or \
            add(lambda: _clues.transform_clues(exercise, cases, outputs, expected, errors, failed)) or \
            add(lambda: _clues.where_clues(exercise, cases, outputs, expected, failed))
    if not any("shape" in ln for ln in said):
        add(lambda: _clues.shape_clues(exercise, cases, outputs, expected, errors, failed))
    add(lambda: _clues.crash_clues(exercise, cases, outputs, errors, failed))
    if impl is not None and exercise.kind == "class":  # the exercise's own locator, or the generic one
        locate = getattr(exercise, "locate", None) or _clues.locate_submodule
        add(lambda: [locate(exercise, impl, cases, outputs, expected, errors)])
    return [ln[0].upper() + ln[1:] for ln in found]


def generic_diagnoses(exercise, cases: list, outputs: list, expected: list, errors: list,
                      clues: bool = True, impl=None) -> list[str]:
    """Lines that need no mutant: clues about the outputs, and what the failing cases share.
    ``impl`` (the learner's answer, optional): for a module, also the first sub-module whose output
    differs from the reference's (``Exercise.locate``, or ``_clues.locate_submodule``). The core
    passes it once it no longer says the exercise's ``locate`` on a line of its own ("Where:")."""
    failed = [i for i, e in enumerate(errors) if e]
    lines = []
    deadline = time.process_time() + GENERIC_SECONDS
    if clues:
        said = []
        try:
            said = output_clues(exercise, cases, outputs, expected, failed, deadline)
        except Exception:  # noqa: BLE001 - a diagnosis never breaks a verdict
            pass
        try:
            said += _more_clues(exercise, cases, outputs, expected, errors, failed, said, impl)
        except Exception:  # noqa: BLE001
            pass
        lines += [CLUE_PREFIX + ln for ln in said[:MAX_CLUES]]
    try:
        share = shared_features(exercise, cases, failed)
    except Exception:  # noqa: BLE001
        share = None
    if share:
        lines.append(SHARE_PREFIX + share)
    return lines


