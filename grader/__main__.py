"""Command line: python -m grader {release,check-release,autograde,feedback,samples,benchmark}."""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from . import course


def cmd_release(args) -> int:
    names = args.assignments or course.assignments()
    if not names:
        print("no assignments in solutions/", file=sys.stderr)
        return 1
    # A throw-away gradebook: releasing never touches the class's records (nbgrader refuses to
    # change an assignment's cells in a gradebook that already holds submissions of it; grading
    # records the current release in the real gradebook itself).
    with tempfile.TemporaryDirectory() as tmp:
        db = f"sqlite:///{tmp}/gradebook.db"
        if set(names) == set(course.assignments()):
            outs = list(course.generate_all(course.NOTEBOOKS, db=db).values())
        else:
            outs = [course.generate(name, course.NOTEBOOKS, db=db) for name in names]
        for out in outs:
            print(f"released {out.relative_to(course.ROOT)}")
    return 0


def cmd_check_release(args) -> int:
    """Fail when notebooks/ differs from a fresh regeneration of solutions/."""
    problems = []
    with tempfile.TemporaryDirectory() as tmp:
        generated = course.generate_all(Path(tmp) / "release", db=f"sqlite:///{tmp}/gradebook.db")
        for name, out in generated.items():
            fresh = course.comparable(course.load_json(out))
            path = course.release_path(name)
            if not path.exists():
                problems.append(f"{path.relative_to(course.ROOT)} is missing: run `make release`")
            elif course.comparable(course.load_json(path)) != fresh:
                problems.append(f"{path.relative_to(course.ROOT)} differs from solutions/: run `make release`")
    extra = {p.parent.name for p in course.NOTEBOOKS.glob("*/*.ipynb")} - set(course.assignments())
    problems += [f"notebooks/{e} has no source in solutions/" for e in sorted(extra)]
    for p in problems:
        print(p, file=sys.stderr)
    return 1 if problems else 0


def cmd_autograde(args) -> int:
    from .pipeline import autograde

    summary = autograde(Path(args.submissions), Path(args.reports), assignments=args.assignments or None,
                        progress=not args.quiet, work=Path(args.work) if args.work else None)
    print(summary)
    return 0


def cmd_feedback(args) -> int:
    from .pipeline import feedback

    n = feedback(Path(args.reports), Path(args.out), work=Path(args.work) if args.work else None)
    print(f"wrote feedback for {n} submissions to {args.out}")
    return 0


def cmd_samples(args) -> int:
    from .samples.bank import materialize

    out = materialize(Path(args.out))
    print(f"wrote the sample bank to {out}")
    return 0


def cmd_benchmark(args) -> int:
    from .benchmark import run, markdown

    print(markdown(run(Path(args.out))))
    return 0


def cmd_export(args) -> int:
    from .export import export

    roster = Path(args.roster) if args.roster else None
    summary = export(Path(args.out), roster, match=args.match, missing=args.missing)
    print(f"wrote {', '.join(summary['files'])} to {args.out}: {summary['graded_students']} graded "
          f"student(s), {summary['assignments']} assignment(s)"
          + (f", {len(summary['unmatched'])} not on the roster" if roster else ""))
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m grader")
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("release", help="regenerate notebooks/ from solutions/")
    r.add_argument("assignments", nargs="*")
    r.set_defaults(fn=cmd_release)
    c = sub.add_parser("check-release", help="fail when notebooks/ drifts from solutions/")
    c.set_defaults(fn=cmd_check_release)
    a = sub.add_parser("autograde", help="grade <submissions>/<student>/<assignment>/<assignment>.ipynb")
    a.add_argument("--submissions", required=True)
    a.add_argument("--reports", required=True)
    a.add_argument("--assignments", nargs="*")
    a.add_argument("--quiet", action="store_true")
    a.add_argument("--work", help="grading workspace (default grader/work, where formgrader looks)")
    a.set_defaults(fn=cmd_autograde)
    f = sub.add_parser("feedback", help="per-student HTML feedback after autograde")
    f.add_argument("--reports", required=True)
    f.add_argument("--out", required=True)
    f.add_argument("--work", help="grading workspace used by autograde (default grader/work)")
    f.set_defaults(fn=cmd_feedback)
    s = sub.add_parser("samples", help="write the sample bank of submissions")
    s.add_argument("--out", required=True)
    s.set_defaults(fn=cmd_samples)
    b = sub.add_parser("benchmark", help="time notebooks, checks, grading (1 and 2 workers); write benchmark.md/.json")
    b.add_argument("--out", default=str(course.ROOT / "reports"))
    b.set_defaults(fn=cmd_benchmark)
    e = sub.add_parser("export", help="grades for the LMS: canvas.csv (with --roster), grades_wide.csv")
    e.add_argument("--out", required=True)
    e.add_argument("--roster", help="the gradebook CSV exported from Canvas (its students and SIS ids)")
    e.add_argument("--match", default="sis_login", choices=["sis_login", "sis_user_id", "canvas_id"],
                   help="which roster column holds the course's student id (default: SIS Login ID)")
    e.add_argument("--missing", default="empty", choices=["empty", "zero"],
                   help="a roster student without a submission: an empty cell (default) or 0")
    e.set_defaults(fn=cmd_export)
    args = p.parse_args(argv)
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
