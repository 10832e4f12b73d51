"""The registry of equivalent mutants, the known survivors, and the report (markdown and JSON).

``tools/mutants_equivalent.toml``: mutants that compute the reference's function on every input
the exercise's contract allows, each confirmed by a person, with a one-line reason. The tool only
proposes candidates (its probe found no difference); a mutant counts as equivalent only when it is
listed here. An entry names one exercise (``exercise``) or several (``exercises``: a mutant of a
shared helper is judged in each exercise that calls it).

``tools/mutants_known_survivors.toml``: the survivors of the fast sample that ``make test``
asserts on (``tests/test_mutants.py``), each with the reason no case kills it.
"""
from __future__ import annotations

import hashlib
import json
import tomllib
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EQUIVALENT_FILE = ROOT / "tools" / "mutants_equivalent.toml"
SURVIVORS_FILE = ROOT / "tools" / "mutants_known_survivors.toml"
REPORT_DIR = ROOT / "tools" / "mutation"


def _entries(path: Path, table: str) -> list:
    if not path.exists():
        return []
    with open(path, "rb") as f:
        data = tomllib.load(f)
    out = []
    for e in data.get(table, []):
        names = e.get("exercises") or [e.get("exercise")]
        for n in names:
            if not e.get("id") or not n:
                raise ValueError(f"{path.name}: every [[{table}]] needs an exercise and an id: {e}")
            if not str(e.get("reason", "")).strip():
                raise ValueError(f"{path.name}: {e['id']} has no reason")
            out.append({"exercise": n, "id": e["id"], "reason": e["reason"].strip(), "diff": e.get("diff", "")})
    return out


def equivalents(path: Path = EQUIVALENT_FILE) -> dict:
    """{(exercise, id): reason}."""
    return {(e["exercise"], e["id"]): e["reason"] for e in _entries(path, "equivalent")}


def known_survivors(path: Path = SURVIVORS_FILE) -> dict:
    """{(exercise, id): reason}."""
    return {(e["exercise"], e["id"]): e["reason"] for e in _entries(path, "survivor")}


def sample(mutants: dict, per_exercise: int, seed: int = 24, skip: dict | None = None) -> list:
    """A fixed sample: per exercise the ``per_exercise`` mutants whose seeded hash of their id is
    smallest (adding or removing other mutants leaves a mutant's rank unchanged), leaving out
    those in ``skip`` (the equivalents)."""
    skip = skip or {}
    out = []
    for name, ms in mutants.items():
        pool = [m for m in ms if (name, m.id) not in skip]
        pool.sort(key=lambda m: hashlib.sha1(f"{seed}:{m.id}".encode()).hexdigest())
        out += pool[:per_exercise]
    return out


# ----------------------------------------------------------------------------------------------
# the report
# ----------------------------------------------------------------------------------------------
def _pct(a: int, b: int) -> str:
    return "–" if b == 0 else f"{100.0 * a / b:.1f}%"


RULE_KINDS = ("forbidden", "budget", "input_changed", "dtype")


def summarise(mutants: dict, results: dict, equivalent: dict) -> dict:
    """Per exercise and overall: counts, kill rate, the messages' figure, the first case's kind."""
    rows = {}
    per_op = defaultdict(Counter)
    stale = []
    for name, ms in mutants.items():
        c = Counter()
        reading = Counter()
        survivors, candidates, items = [], [], []
        for m in ms:
            r = results.get((name, m.id))
            if r is None:
                c["not run"] += 1
                continue
            status = r["status"]
            eq = (name, m.id) in equivalent
            if status == "stillborn":
                c["stillborn"] += 1
                per_op[m.op]["stillborn"] += 1
                continue
            if status == "error":
                c["error"] += 1
                continue
            c["made"] += 1
            per_op[m.op]["made"] += 1
            item = {"id": m.id, "op": m.op, "unit": m.unit, "diff": m.diff, "status": status}
            if status == "killed":
                if eq:
                    stale.append(f"{name} {m.id}: listed as equivalent but its check kills it")
                c["killed"] += 1
                per_op[m.op]["killed"] += 1
                rd = r.get("reading") or {}
                if r.get("timeout"):
                    c["timeout"] += 1
                for k in ("bank", "clue", "share", "named"):
                    reading[k] += bool(rd.get(k))
                reading["strict"] += bool(rd.get("bank") or rd.get("share"))
                reading["first:" + rd.get("first", "?")] += 1
                item["first"] = rd.get("first")
                item["named"] = [k for k in ("bank", "clue", "share") if rd.get(k)]
                item["message"] = "\n".join(r.get("message", "").splitlines()[:3])
            elif eq:
                c["equivalent"] += 1
                per_op[m.op]["equivalent"] += 1
                item["status"] = "equivalent"
                item["reason"] = equivalent[(name, m.id)]
            else:
                c["survived"] += 1
                per_op[m.op]["survived"] += 1
                item["probe"] = r.get("probe")
                survivors.append(item)
                p = r.get("probe") or {}
                if p and p.get("complete") and p.get("differs") is None:
                    candidates.append(item)
            items.append(item)
        live = c["killed"] + c["survived"]
        rows[name] = {"made": c["made"], "killed": c["killed"], "survived": c["survived"],
                      "equivalent": c["equivalent"], "stillborn": c["stillborn"], "timeout": c["timeout"],
                      "error": c["error"], "not_run": c["not run"],
                      "kill_rate": None if live == 0 else c["killed"] / live,
                      "named": reading["named"], "bank": reading["bank"], "clue": reading["clue"],
                      "share": reading["share"], "named_strict": reading["strict"],
                      "first": {k[6:]: v for k, v in reading.items() if k.startswith("first:")},
                      "survivors": survivors, "candidates": candidates, "mutants": items}
    ids = {(n, m.id) for n, ms in mutants.items() for m in ms}
    for key in equivalent:
        if key[0] in mutants and key not in ids:
            stale.append(f"{key[0]} {key[1]}: listed as equivalent but no such mutant now")
    return {"exercises": rows, "operators": {k: dict(v) for k, v in per_op.items()}, "stale": stale}


def _totals(rows: dict) -> dict:
    t = Counter()
    first = Counter()
    for r in rows.values():
        for k in ("made", "killed", "survived", "equivalent", "stillborn", "timeout", "named", "bank", "clue",
                  "share", "named_strict", "error", "not_run"):
            t[k] += r[k]
        first.update(r["first"])
    t["first"] = first
    return t


def markdown(summary: dict, meta: dict) -> str:
    rows = summary["exercises"]
    t = _totals(rows)
    live = t["killed"] + t["survived"]
    below = [n for n, r in rows.items() if r["kill_rate"] is not None and r["kill_rate"] < 0.95]
    out = [
        "# Machine-made mutants of the references, through their checks",
        "",
        "Made by `make mutants` (`python tools/mutate.py`, see its docstring): every reference's code (the",
        "function or class, the methods the exercise calls, the `utils` helpers they call) mutated one",
        "operator at a time, each mutant run through its exercise's check (`run_check`, the visible",
        "cases at the default seed). **killed**: the check fails it (a time limit counts as killed);",
        "**survived**: it passes; **equivalent**: it passes and a person confirmed, in",
        "`tools/mutants_equivalent.toml`, that it computes the same function on every input the contract",
        "allows. Kill rate = killed / (killed + survived). Mutants that do not compile or build",
        "(stillborn) are not counted.",
        "",
        f"Run: {meta.get('when', '')}, {meta.get('jobs')} worker processes, {meta.get('timeout'):g} s per mutant, "
        f"{meta.get('wall', 0) / 60:.1f} min wall clock ({meta.get('cpu', 0) / 60:.1f} min of worker CPU) "
        f"on {meta.get('machine', 'this machine')}; torch {meta.get('torch', '?')}.",
        "",
        f"**Overall: {t['made']} mutants, {t['killed']} killed, {t['survived']} survived, {t['equivalent']} "
        f"equivalent: {_pct(t['killed'], live)} of the non-equivalent ones killed.** "
        f"{len(rows) - len(below)} of {len(rows)} exercises reach the issue's 95%.",
        "",
        f"**Messages' figure: {_pct(t['named'], t['killed'])} of the killed mutants get a message that names "
        f"the mistake or the property their failing cases share** (a `Likely mistake:` line, a `Clue:` line or "
        f"a `What the failing cases share:` line); counting only `Likely mistake` and shared-features lines: "
        f"{_pct(t['named_strict'], t['killed'])}. The issue aims at 60%.",
        "",
        "| exercise | made | killed | survived | equivalent | kill rate | named | likely mistake | clue | share "
        "| first case: rule | value | error | judge | stillborn |",
        "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
    ]

    def first_counts(f: Counter | dict):
        rule = sum(f.get(k, 0) for k in RULE_KINDS)
        other = sum(v for k, v in f.items() if k not in RULE_KINDS + ("value", "error", "judge"))
        return rule, f.get("value", 0), f.get("error", 0) + other, f.get("judge", 0)

    for name, r in rows.items():
        rule, value, error, judge = first_counts(r["first"])
        rate = "–" if r["kill_rate"] is None else f"{100 * r['kill_rate']:.1f}%"
        flag = "" if r["kill_rate"] is None or r["kill_rate"] >= 0.95 else " ⚠️"
        out.append(f"| {name} | {r['made']} | {r['killed']} | {r['survived']} | {r['equivalent']} | {rate}{flag} "
                   f"| {_pct(r['named'], r['killed'])} | {r['bank']} | {r['clue']} | {r['share']} "
                   f"| {rule} | {value} | {error} | {judge} | {r['stillborn']} |")
    rule, value, error, judge = first_counts(t["first"])
    out.append(f"| **all** | **{t['made']}** | **{t['killed']}** | **{t['survived']}** | **{t['equivalent']}** "
               f"| **{_pct(t['killed'], live)}** | **{_pct(t['named'], t['killed'])}** | {t['bank']} | {t['clue']} "
               f"| {t['share']} | {rule} | {value} | {error} | {judge} | {t['stillborn']} |")
    k = t["killed"] or 1
    rules_said = ", ".join(f"{x} {t['first'].get(x, 0)}" for x in RULE_KINDS)
    out += [
        "",
        "*named*: share of the killed mutants whose message has a `Likely mistake:`, `Clue:` or shared-features "
        "line; the next three columns count each kind (a message may have several). *first case*: what the "
        "first failing case reports: a guard or rule (a forbidden call, a budget, a changed input, a dtype), "
        "a value comparison, an error the mutant raised (or the check itself: "
        f"{t['first'].get('check_error', 0)}, or a time limit: {t['first'].get('timeout', 0)}), or a judged "
        "case's own verdict (statistics, structure).",
        "",
        f"First failing case over all killed mutants: rule {_pct(rule, k)} "
        f"({rules_said}), value comparison {_pct(value, k)}, "
        f"an error raised {_pct(error, k)}, a judged case {_pct(judge, k)}.",
        "",
        "## By operator",
        "",
        "| operator | made | killed | survived | equivalent | kill rate |",
        "|---|--:|--:|--:|--:|--:|",
    ]
    ops = summary["operators"]
    for op in sorted(ops, key=lambda o: (-ops[o].get("survived", 0), o)):
        c = ops[op]
        out.append(f"| {op} | {c.get('made', 0)} | {c.get('killed', 0)} | {c.get('survived', 0)} | "
                   f"{c.get('equivalent', 0)} | {_pct(c.get('killed', 0), c.get('killed', 0) + c.get('survived', 0))} |")
    out += ["", "## Survivors", "",
            "Each is a mistake the visible check lets through: kill it with a new case, or, when it is",
            "the same function, list it in `tools/mutants_equivalent.toml` with the reason. *probe*: where the",
            "tool found the mutant differing from the reference (the check's cases at seeds 0–3, as they",
            "are, in float64, with float64 gradients; then other values: redrawn, × 30, × 1e-3, other",
            "scalar arguments); *no difference found*: a candidate equivalent that no person has confirmed.",
            ""]
    for name, r in rows.items():
        if not r["survivors"]:
            continue
        out.append(f"### {name} ({r['survived']})")
        out.append("")
        for s in r["survivors"]:
            p = s.get("probe") or {}
            if not p:
                where = "not probed"
            elif p.get("differs") == "cases":
                where = f"differs on the check's cases: {p.get('where')}"
            elif p.get("differs") == "stress":
                where = f"differs on other values: {p.get('where')}"
            elif not p.get("complete", True):
                where = "probe incomplete (time)"
            else:
                where = "**no difference found** (candidate equivalent)"
            out.append(f"- `{s['id']}` {s['diff']} — {where}")
        out.append("")
    if summary["stale"]:
        out += ["## Stale registry entries", ""] + [f"- {s}" for s in summary["stale"]] + [""]
    return "\n".join(out) + "\n"


def write(summary: dict, meta: dict, out_dir: Path) -> tuple[Path, Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    md = out_dir / "report.md"
    js = out_dir / "report.json"
    md.write_text(markdown(summary, meta))
    data = {"meta": meta, "totals": {k: v for k, v in _totals(summary["exercises"]).items()},
            "operators": summary["operators"], "stale": summary["stale"],
            "exercises": {n: {k: v for k, v in r.items() if k != "candidates"} for n, r in summary["exercises"].items()}}
    js.write_text(json.dumps(data, indent=1, ensure_ascii=False, default=dict) + "\n")
    return md, js


def candidates_toml(summary: dict) -> str:
    """The probe's candidate equivalents, as entries to confirm (or not) by hand."""
    out = []
    for name, r in summary["exercises"].items():
        for s in r["candidates"]:
            out += ["[[equivalent]]", f'exercise = "{name}"', f'id = "{s["id"]}"',
                    f"diff = {json.dumps(s['diff'], ensure_ascii=False)}", 'reason = ""', ""]
    return "\n".join(out)
