"""How a solution notebook's stored outputs are compared with a new run (issue 23).

The rule, for every run that compares outputs (nbval on the machine's own CPU kernels, and the
demo-variant run under ``ATEN_CPU_CAPABILITY=default``):

* text is compared exactly, after the sanitizers of ``grader/nbval_sanitize.cfg`` (addresses,
  timings, progress rates, figure sizes);
* an integer is compared exactly (a count, a shape, a size);
* a number printed with a decimal point or an exponent is compared **to within one unit of its
  last printed digit**: ``0.868`` matches ``0.867`` and ``0.869``, not ``0.866``; ``3.0e-07`` matches
  ``2.9e-07`` to ``3.1e-07``. A value that holds to the precision it is printed at can still round
  either way of a boundary on another CPU; a value that moves more than that is printed at too many
  digits: print it at the precision the cell's assert guarantees (``utils.measure.below`` prints a
  residual as the bound it is asserted under), or mark the cell ``# NBVAL_IGNORE_OUTPUT`` and
  assert the claim.
* a cell marked ``# NBVAL_IGNORE_OUTPUT`` or ``# NBVAL_SKIP`` is not compared; images never are.

``conftest.py`` puts :func:`align` in front of nbval's own comparison, so that nbval and the
variant run (:func:`differences`) judge by one rule.
"""
from __future__ import annotations

import configparser
import re
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SANITIZE_CFG = ROOT / "grader" / "nbval_sanitize.cfg"

# A number not glued to a word or another number: 12, -0.5, 3.0e-07, .5, 1e4.
_NUMBER = re.compile(r"(?<![\w.])[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?(?![\w.])")

# nbval's own list of what it never compares (plugin.IPyNbFile.skip_compare), images included.
SKIP_KEYS = {"metadata", "traceback", "prompt_number", "output_type", "name", "execution_count",
             "application/vnd.jupyter.widget-view+json", "image/png", "image/jpeg"}
MARKERS_NOT_COMPARED = ("NBVAL_IGNORE_OUTPUT", "NBVAL_SKIP")


def _is_float_token(tok: str) -> bool:
    return "." in tok or "e" in tok or "E" in tok


def _unit(tok: str) -> float:
    """One unit of the last printed digit of ``tok`` (``0.868`` → 0.001, ``3.0e-07`` → 1e-08)."""
    mantissa, _, exponent = tok.lower().partition("e")
    decimals = len(mantissa.split(".", 1)[1]) if "." in mantissa else 0
    return 10.0 ** (int(exponent or 0) - decimals)


def numbers_agree(stored: str, new: str) -> bool:
    """Whether two number tokens agree by the rule above."""
    if stored == new:
        return True
    if not (_is_float_token(stored) and _is_float_token(new)):
        return False  # integers (and an integer against a float) are exact
    try:
        a, b = float(stored), float(new)
    except ValueError:
        return False
    if (a == 0.0 or b == 0.0) and ("e" in stored.lower() or "e" in new.lower()):
        return False  # 0.0e+00 has no magnitude to be one unit of: exact
    return abs(a - b) <= 1.0001 * min(_unit(stored), _unit(new))


def align(stored: str, new: str) -> str:
    """``new`` with every number that agrees with its stored counterpart written as the stored one.

    The two texts must have the same words around their numbers (the same skeleton); otherwise
    ``new`` comes back unchanged and the exact comparison that follows reports the difference.
    """
    if not isinstance(stored, str) or not isinstance(new, str) or stored == new:
        return new
    s_nums, n_nums = _NUMBER.findall(stored), _NUMBER.findall(new)
    if len(s_nums) != len(n_nums) or _NUMBER.split(stored) != _NUMBER.split(new):
        return new
    it = iter(zip(s_nums, n_nums))

    def pick(match):
        s, n = next(it)
        return s if numbers_agree(s, n) else n

    return _NUMBER.sub(pick, new)


def align_outputs(stored_outputs, new_outputs) -> list:
    """``new_outputs`` (nbformat output nodes) with each stream's and each text MIME value's numbers
    aligned to the stored output at the same place (:func:`align`); for nbval, whose own exact
    comparison (and sanitizers) follow (nbval has joined consecutive streams in both already)."""
    import copy

    stored, new = list(stored_outputs), list(new_outputs)
    if len(stored) != len(new):
        return new_outputs
    aligned = []
    for s, n in zip(stored, new):
        n = copy.deepcopy(n)
        if n.get("output_type") == "stream" and s.get("output_type") == "stream":
            n["text"] = align(_text(s.get("text", "")), _text(n.get("text", "")))
        elif "data" in n and "data" in s:
            for mime, value in n["data"].items():
                if mime.startswith("text/") and mime in s["data"]:
                    n["data"][mime] = align(_text(s["data"][mime]), _text(value))
        aligned.append(n)
    return aligned


def _text(value) -> str:
    return "".join(value) if isinstance(value, list) else value


def sanitizers() -> list:
    cfg = configparser.ConfigParser()
    cfg.read(SANITIZE_CFG)
    return [(re.compile(cfg[s]["regex"]), cfg[s]["replace"]) for s in cfg.sections()]


def sanitize(text, patterns) -> str:
    if not isinstance(text, str):
        return text
    for regex, replace in patterns:
        text = regex.sub(replace, text)
    return text


def _flatten(outputs) -> dict:
    """nbval's view of a cell's outputs: each output key (a stream's name, a MIME type) to the list
    of its values, in order."""
    flat = defaultdict(list)
    for out in outputs:
        if out.get("output_type") == "stream":
            flat[out.get("name", "stdout")].append(_text(out.get("text", "")))
            continue
        for key, value in out.items():
            if key in SKIP_KEYS:
                continue
            if key == "data":
                for mime, v in value.items():
                    if mime not in SKIP_KEYS:
                        flat[mime].append(_text(v))
            else:
                flat[key].append(value if not isinstance(value, list) else _text(value))
    return flat


def _merge_streams(outputs) -> list:
    """Consecutive stream outputs of one name joined into one (a kernel may split a print's text
    over several messages; the stored notebook and a new run need not split it alike)."""
    merged = []
    for out in outputs:
        if (out.get("output_type") == "stream" and merged and merged[-1].get("output_type") == "stream"
                and merged[-1].get("name") == out.get("name")):
            merged[-1] = dict(merged[-1], text=_text(merged[-1]["text"]) + _text(out.get("text", "")))
        else:
            merged.append(dict(out))
    return merged


def uses_learner_code(cell) -> bool:
    """An exercise's own cell or its check (their output is the learner's verdict and tips)."""
    meta = cell.get("metadata", {}).get("nbgrader", {}) or {}
    return bool(meta.get("solution") or meta.get("grade"))


def compared(source: str) -> bool:
    """Whether a code cell's outputs are compared at all."""
    return not any(m in source for m in MARKERS_NOT_COMPARED)


def cell_difference(stored_outputs, new_outputs, patterns=None) -> str | None:
    """None when a new run's outputs of one cell match the stored ones by the rule above, else a
    short description of the first difference."""
    patterns = sanitizers() if patterns is None else patterns
    ref, new = _flatten(_merge_streams(stored_outputs)), _flatten(_merge_streams(new_outputs))
    if set(ref) != set(new):
        return f"output kinds differ: stored {sorted(ref)}, now {sorted(new)}"
    for key, ref_values in ref.items():
        new_values = new[key]
        if len(ref_values) != len(new_values):
            return f"{key}: {len(ref_values)} stored outputs, {len(new_values)} now"
        for r, n in zip(ref_values, new_values):
            n = align(r, n)
            if sanitize(r, patterns) != sanitize(n, patterns):
                return f"{key}: stored {_excerpt(r, n)}"
    return None


def _excerpt(stored: str, new: str) -> str:
    if not isinstance(stored, str) or not isinstance(new, str):
        return f"{stored!r}, now {new!r}"
    s_lines, n_lines = stored.splitlines(), new.splitlines()
    for a, b in zip(s_lines, n_lines):
        if a != b:
            return f"{a.strip()[:160]!r}, now {b.strip()[:160]!r}"
    return f"{len(s_lines)} lines, now {len(n_lines)} lines"


def differences(stored_nb: dict, new_nb: dict, skip=lambda cell: False, learner_free: bool = False) -> list:
    """``(index, message)`` for every compared code cell of ``stored_nb`` whose outputs differ in
    ``new_nb`` (the same cells in the same order, ``skip(cell)`` cells of ``new_nb`` removed).

    ``learner_free``: compare only the cells whose output cannot depend on how a learner wrote an
    exercise (for a run with other correct answers in place): not the exercise and check cells, and
    not the demo cells marked ``%%needs`` (every demo cell that uses a learner's function or what
    one made carries it: the release run, where those functions are stubs, proves it).
    """
    patterns = sanitizers()
    new_cells = [c for c in new_nb["cells"] if not skip(c)]
    if len(new_cells) != len(stored_nb["cells"]):
        return [(-1, f"{len(stored_nb['cells'])} cells stored, {len(new_cells)} run")]
    found = []
    for i, (cell, run) in enumerate(zip(stored_nb["cells"], new_cells)):
        source = _text(cell.get("source", ""))
        if cell["cell_type"] != "code" or not compared(source):
            continue
        if learner_free and (uses_learner_code(cell) or source.lstrip().startswith("%%needs")):
            continue
        diff = cell_difference(cell.get("outputs", []), run.get("outputs", []), patterns)
        if diff:
            found.append((i, diff))
    return found
