"""How many mistakes outside the banks do the checks still name? (issue 16 §5)

For every exercise of the course and every mutant in its bank, the mutant is left out of the bank
(``Exercise.mutants`` without it) and the check is run on it, so the mutant stands for a mistake
nobody listed. Each rejection is classified by the lines of its message:

* ``bank``: another mutant's hint (or the scale or budget diagnosis) says "Likely mistake: ...";
* ``clue``: a generic diagnosis of the output says "Clue: ..." (transposed, a wrong normalisation
  dim, a constant factor or offset, a permutation, float32 precision, a mask off by one, ...);
* ``which``: "Clue: out is right in every case; only weights is wrong" (which output is wrong);
* ``share``: "What the failing cases share: ..." (a feature of the cases that tells the failing
  ones from the passing ones);
* ``none``: only the first failing case and its largest error.

Run from the repository root (a few minutes: one failing check per mutant)::

    python tools/diagnosis_figure.py            # every exercise
    python tools/diagnosis_figure.py softmax masked_softmax    # some exercises
    python tools/diagnosis_figure.py --show     # also print each generic line

It prints one row per exercise and the totals: the share of rejections named by a generic
diagnosis of the output (clue), by any generic line (clue, which or share), and
by anything (bank, clue, which or share).
"""
from __future__ import annotations

import argparse
import re
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

CLUE = "Clue: "
SHARE = "What the failing cases share: "
BANK = "Likely mistake: "


def classify(message: str) -> set:
    kinds = set()
    for line in message.splitlines():
        if line.startswith(BANK):
            kinds.add("bank")
        elif line.startswith(CLUE) and re.search(r" (is|are) right in every case; only ", line):
            kinds.add("which")
        elif line.startswith(CLUE):
            kinds.add("clue")
        elif line.startswith(SHARE):
            kinds.add("share")
    return kinds


def leave_one_out(exercise) -> list:
    """[(mutant name, set of kinds, message or None if the check passed)] for one exercise."""
    from utils.checks import CheckFailure
    from utils.checks._core import run_check

    rows = []
    for m in exercise.mutants:
        alone = replace(exercise, mutants=[o for o in exercise.mutants if o is not m])
        try:
            run_check(alone, m.impl, quiet=True)
        except CheckFailure as err:
            rows.append((m.name, classify(str(err)), str(err)))
        else:
            rows.append((m.name, set(), None))
    return rows


def figure(names=None, show: bool = False, out=print) -> dict:
    import warnings

    warnings.simplefilter("ignore")
    from utils.checks import EXERCISES

    names = names or sorted(EXERCISES)
    totals = {"rejected": 0, "clue": 0, "generic": 0, "any": 0, "bank": 0, "passed": 0}
    out("| exercise | mutants | rejected | bank | clue | clue, which or share | any |")
    out("|---|---|---|---|---|---|---|")
    start = time.time()
    for name in names:
        rows = leave_one_out(EXERCISES[name])
        rejected = [r for r in rows if r[2] is not None]
        n = {
            "rejected": len(rejected),
            "bank": sum("bank" in k for _, k, _ in rejected),
            "clue": sum("clue" in k for _, k, _ in rejected),
            "generic": sum(bool(k & {"clue", "share", "which"}) for _, k, _ in rejected),
            "any": sum(bool(k) for _, k, _ in rejected),
            "passed": len(rows) - len(rejected),
        }
        for key in totals:
            totals[key] += n[key]
        out(f"| {name} | {len(rows)} | {n['rejected']} | {n['bank']} | {n['clue']} | {n['generic']} | {n['any']} |")
        if show:
            for mname, kinds, msg in rejected:
                generic = [ln for ln in msg.splitlines() if ln.startswith((CLUE, SHARE))]
                out(f"    {mname}: {', '.join(sorted(kinds)) or 'none'}")
                for ln in generic:
                    out(f"        {ln}")
    r = max(totals["rejected"], 1)
    out(f"\nrejected {totals['rejected']} (passed: {totals['passed']}); named by another mutant's hint "
        f"(bank): {totals['bank']} ({100 * totals['bank'] / r:.0f}%); by a generic clue: {totals['clue']} "
        f"({100 * totals['clue'] / r:.0f}%); by a clue, which output or the shared features: {totals['generic']} "
        f"({100 * totals['generic'] / r:.0f}%); by anything: {totals['any']} ({100 * totals['any'] / r:.0f}%) "
        f"[{time.time() - start:.0f} s]")
    return totals


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("exercises", nargs="*", help="exercise names (default: all)")
    parser.add_argument("--show", action="store_true", help="print the generic lines of each rejection")
    args = parser.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    figure(args.exercises or None, show=args.show)


if __name__ == "__main__":
    main()
