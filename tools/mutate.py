"""Machine-made mutants of every reference, run through their checks (issue 24, items 4 and 5).

A small AST mutator made for tensor code (``tools/mutation/operators.py``: another dim, a dropped
or added transpose, off-by-one masks, ranges and slices, in-place variants, another fill value,
swapped arguments, p ↔ 1 − p, a dropped scale, another dtype, keepdim dropped, max ↔ min,
sum ↔ mean, ± 1, flipped comparisons, + ↔ −, a dropped no_grad/detach or clamp, a dropped
statement) makes every one-place mutant of each exercise's reference: the function or class
itself, the methods the exercise calls and the helpers of ``utils`` they call. Each mutant is
built from its mutated module (``tools/mutation/build.py``) and run through the exercise's check
in a sandboxed worker (``tools/mutation/worker.py``: it may write only in its temp folder; a
mutant without a verdict within ``--timeout`` seconds is killed with its worker and counted as
killed). Each mutant is **killed** (the check fails it), **survived**, or **equivalent** (it
survives and ``tools/mutants_equivalent.toml`` lists it, confirmed by a person, with the reason);
one that does not compile or build is stillborn and not counted. For every survivor a probe looks
for an input on which it differs from the reference (the check's cases at seeds 0-3, in float64,
float64 gradients, other values and scalars): a survivor with no difference found is a candidate
equivalent, for a person to confirm or to kill with a new case.

The report (``tools/mutation/report.md`` and ``report.json``): per exercise the mutants made,
killed, survived, equivalent and the kill rate of the non-equivalent ones; the messages' figure
(the share of killed mutants whose message names the mistake, a ``Likely mistake:`` line, or a
generic diagnosis, ``Clue:`` or ``What the failing cases share:``); what the first failing case
reports (a rule, a value comparison, an error); every survivor with its one-line diff.

    python tools/mutate.py                       # every exercise (make mutants): the report
    python tools/mutate.py softmax masked_softmax    # some exercises (report in build/mutation/)
    python tools/mutate.py --list softmax        # the mutants, with their ids and diffs
    python tools/mutate.py --show ID             # one mutant's source line and check message
    python tools/mutate.py --reuse               # reuse results while mutant and checks are unchanged
    python tools/mutate.py --candidates          # candidate equivalents as TOML, to confirm by hand

Only the course's public API is used: ``utils.checks.EXERCISES``, an exercise's ``reference`` and
``make_cases``, ``run_check`` and ``CheckFailure``.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

CACHE = ROOT / "build" / "mutation" / "results.jsonl"


_FINGERPRINTS: dict = {}


def _checks_fingerprint(exercise: str) -> str:
    """What a verdict depends on besides the mutant: the checks' core (every ``utils/*.py`` and
    ``utils/checks/_*.py`` that is not a chapter's) and the exercise's own chapter file. A result is
    reused only while both are unchanged (a new case must re-judge the mutants it may kill)."""
    if exercise not in _FINGERPRINTS:
        from utils.checks import EXERCISES

        if "__core__" not in _FINGERPRINTS:
            files = sorted((ROOT / "utils").glob("*.py")) + sorted(
                f for f in (ROOT / "utils" / "checks").glob("_*.py") if not f.name.startswith("_ch"))
            _FINGERPRINTS["__core__"] = hashlib.sha1(b"".join(f.read_bytes() for f in files)).hexdigest()
        ex = EXERCISES[exercise]
        module = sys.modules.get(getattr(ex, "own_cases", ex.make_cases).__module__)
        own = Path(getattr(module, "__file__", "") or "")
        data = own.read_bytes() if own.is_file() else b""
        _FINGERPRINTS[exercise] = hashlib.sha1(_FINGERPRINTS["__core__"].encode() + data).hexdigest()
    return _FINGERPRINTS[exercise]


def _key(m) -> str:
    return hashlib.sha1(m.source.encode() + _checks_fingerprint(m.exercise).encode()).hexdigest()[:16]


def load_cache() -> dict:
    out = {}
    if CACHE.exists():
        for line in CACHE.read_text().splitlines():
            try:
                r = json.loads(line)
            except json.JSONDecodeError:
                continue
            out[(r["exercise"], r["id"], r.get("key"))] = r
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("exercises", nargs="*", help="exercise names (default: every exercise)")
    ap.add_argument("--jobs", type=int, default=2, help="worker processes (default 2)")
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds per mutant before it is killed (default 120)")
    ap.add_argument("--probe-seconds", type=float, default=60.0, help="CPU seconds of equivalence probe per survivor")
    ap.add_argument("--no-probe", action="store_true", help="do not probe survivors for a difference")
    ap.add_argument("--out", type=Path, help="report folder (default: tools/mutation for every exercise, "
                                              "build/mutation for some)")
    ap.add_argument("--list", action="store_true", help="list the mutants and stop")
    ap.add_argument("--show", metavar="ID", help="one mutant: its diff and its check's message")
    ap.add_argument("--reuse", action="store_true", help="reuse the results of earlier runs for unchanged mutants")
    ap.add_argument("--candidates", action="store_true",
                    help="print the probe's candidate equivalents (from the last results) as TOML")
    args = ap.parse_args(argv)

    import warnings

    warnings.simplefilter("ignore")
    from tools.mutation import report
    from tools.mutation.pool import run_tasks
    from tools.mutation.scope import all_mutants
    from utils.checks import EXERCISES

    unknown = [n for n in args.exercises if n not in EXERCISES]
    if unknown:
        ap.error(f"no such exercise: {', '.join(unknown)}")
    mutants = all_mutants(args.exercises or None)

    if args.list:
        for name, ms in mutants.items():
            print(f"## {name}: {len(ms)} mutants")
            for m in ms:
                print(f"{m.id}  {m.diff}")
        return 0
    if args.show:
        found = [m for ms in mutants.values() for m in ms if m.id == args.show]
        if not found:
            print(f"no mutant {args.show}")
            return 1
        res = run_tasks([m.to_task(probe=not args.no_probe) | {"probe_seconds": args.probe_seconds}
                         for m in found], jobs=1, timeout=args.timeout)
        for m, r in zip(found, sorted(res, key=lambda r: [x.exercise for x in found].index(r["exercise"]))):
            print(f"{m.exercise}: {m.id}\n  {m.diff}\n  status: {r['status']}")
            if r.get("message"):
                print("  " + r["message"].replace("\n", "\n  "))
            if r.get("probe"):
                print(f"  probe: {r['probe']}")
        return 0

    cache = load_cache() if (args.reuse or args.candidates) else {}
    results, tasks = {}, []
    for name, ms in mutants.items():
        for m in ms:
            hit = cache.get((name, m.id, _key(m)))
            if hit is not None and (args.no_probe or hit["status"] != "survived" or "probe" in hit):
                results[(name, m.id)] = hit
            elif not args.candidates:
                tasks.append(m.to_task(probe=not args.no_probe) | {"probe_seconds": args.probe_seconds, "key": _key(m)})
    keys = {(t["exercise"], t["id"]): t["key"] for t in tasks}

    t0 = time.time()
    done = [0]
    CACHE.parent.mkdir(parents=True, exist_ok=True)
    cache_file = open(CACHE, "a")  # noqa: SIM115

    def on_result(r):
        r["key"] = keys.get((r["exercise"], r["id"]))
        results[(r["exercise"], r["id"])] = r
        cache_file.write(json.dumps(r) + "\n")
        cache_file.flush()
        done[0] += 1
        if done[0] % 50 == 0 or done[0] == len(tasks):
            el = time.time() - t0
            print(f"  {done[0]}/{len(tasks)} mutants, {el / 60:.1f} min", flush=True)

    if tasks:
        print(f"{sum(len(v) for v in mutants.values())} mutants of {len(mutants)} exercises; "
              f"running {len(tasks)} on {args.jobs} workers ...", flush=True)
        run_tasks(tasks, jobs=args.jobs, timeout=args.timeout, on_result=on_result, log=print)
    cache_file.close()
    wall = time.time() - t0

    equivalent = report.equivalents()
    summary = report.summarise(mutants, results, equivalent)
    if args.candidates:
        print(report.candidates_toml(summary))
        return 0
    import torch

    meta = {"when": time.strftime("%Y-%m-%d"), "jobs": args.jobs, "timeout": args.timeout, "wall": round(wall, 1),
            "cpu": round(sum(r.get("cpu", 0) + r.get("probe_cpu", 0) for r in results.values()), 1),
            "machine": f"{os.cpu_count()} CPU cores ({platform.machine()})", "torch": torch.__version__,
            "reused": sum(len(v) for v in mutants.values()) - len(tasks)}
    out = args.out or (report.REPORT_DIR if not args.exercises else ROOT / "build" / "mutation")
    md, js = report.write(summary, meta, out)
    t = report._totals(summary["exercises"])
    live = t["killed"] + t["survived"]
    print(f"{t['made']} mutants: {t['killed']} killed, {t['survived']} survived, {t['equivalent']} equivalent "
          f"({report._pct(t['killed'], live)} killed); messages naming the mistake: "
          f"{report._pct(t['named'], t['killed'])}; {wall / 60:.1f} min")
    print(f"report: {md.relative_to(ROOT) if md.is_relative_to(ROOT) else md}, {js.name}")
    for s in summary["stale"]:
        print(f"stale: {s}")
    errors = sum(r["error"] for r in summary["exercises"].values())
    if errors:
        print(f"{errors} mutants could not be judged (worker errors): see the JSON")
    return 1 if summary["stale"] else 0


if __name__ == "__main__":
    sys.exit(main())
