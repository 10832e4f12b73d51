"""Rebuild what gets graded from a submission and the release: of the learner's notebook, only
what grading needs is kept (issue 25 §2), before any tool (nbformat, nbgrader, nbconvert,
formgrader) reads it.

- Test cells (nbgrader grade cells that are not answers) and other locked cells are restored from
  the release, source and metadata; an edited or deleted one is reported as tampering.
- Answer cells keep the learner's source with the release's metadata and cell type. Cells the
  learner added stay (their helpers may be used by their answers) with their source only: no
  metadata at all (tags, nbgrader's, anything), no attachment, no output.
- A raw cell of the learner's becomes a Markdown cell showing its text escaped (nbconvert would
  put a raw cell's text into the page as it is).
- All outputs are cleared: only what runs in the sandbox counts.
- The notebook's own metadata is the release's.
- A notebook that is not valid JSON, or that has none of the assignment's graded cells (another
  assignment's notebook), is replaced by the untouched release and reported.
The submission is parsed as plain JSON (linear in its size, ``load_submission``); nothing of it is
validated against the notebook schema, whose cost on learner-made metadata is not linear.
"""
from __future__ import annotations

import copy
import json
import os
from dataclasses import dataclass, field
from pathlib import Path


def nbg(cell: dict) -> dict:
    meta = cell.get("metadata", {})
    m = meta.get("nbgrader", {}) if isinstance(meta, dict) else {}
    return m if isinstance(m, dict) else {}


def grade_id(cell: dict) -> str | None:
    gid = nbg(cell).get("grade_id")
    return gid if isinstance(gid, str) else None


def is_test(cell: dict) -> bool:
    m = nbg(cell)
    return bool(m.get("grade")) and not m.get("solution")


def is_answer(cell: dict) -> bool:
    return bool(nbg(cell).get("solution"))


def is_locked_release_cell(cell: dict) -> bool:
    m = nbg(cell)
    return bool(m.get("locked")) or is_test(cell)


def is_demo(cell: dict) -> bool:
    """A course demo cell: locked by the release (grader/nbgrader_config.py), scoring nothing."""
    m = nbg(cell)
    return bool(m.get("locked")) and not m.get("grade") and not m.get("solution")


def source(cell: dict) -> str:
    s = cell.get("source", "")
    return "".join(s) if isinstance(s, list) else str(s)


@dataclass
class Restored:
    notebook: dict
    notes: list = field(default_factory=list)  # what was wrong with the submission, for the reasons
    problem: str | None = None  # set when the submission could not be used at all


MAX_BYTES = 8 * 2**20  # a notebook larger than this is refused before any work is done
NOTES = "_grader_notes"  # what load_submission found wrong with a file it could still use
MAX_CELLS = 1000


def load_submission(path: Path, max_bytes: int = MAX_BYTES, max_cells: int = MAX_CELLS,
                    root: Path | None = None) -> tuple[dict | None, str | None]:
    """The submitted notebook, or why it cannot be graded. With ``root`` (the submissions folder),
    no link is followed anywhere on the path below it (``sandbox.read_below``)."""
    from .sandbox import read_below, read_regular

    if not os.path.lexists(path):
        return None, "no notebook was submitted for this assignment"
    if root is not None:
        data, why = read_below(root, list(path.relative_to(root).parts), max_bytes)
    else:
        data, why = read_regular(path, max_bytes)
    if data is None:
        if "larger" in (why or ""):
            return None, f"the notebook file is larger than {max_bytes // 2**20} MiB: it was not graded"
        return None, f"the notebook file could not be read ({why})"
    try:
        nb = json.loads(data.decode("utf-8"))
    except RecursionError:
        return None, "the notebook file is nested too deeply to be a notebook"
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        return None, f"the notebook file is not valid notebook JSON ({type(err).__name__}: {str(err)[:120]})"
    if not isinstance(nb, dict) or not isinstance(nb.get("cells"), list):
        return None, "the notebook file has no list of cells"
    if len(nb["cells"]) > max_cells:
        return None, f"the notebook has {len(nb['cells'])} cells, more than the {max_cells} allowed: it was not graded"
    # A malformed cell costs only itself: it is left out, and the reasons say so. Metadata that is
    # not what the schema wants costs nothing: grading keeps none of the learner's metadata.
    kept, dropped = [], 0
    for cell in nb["cells"]:
        src = cell.get("source", "") if isinstance(cell, dict) else None
        if not isinstance(cell, dict) or cell.get("cell_type") not in ("code", "markdown", "raw") or not (
                isinstance(src, str) or (isinstance(src, list) and all(isinstance(x, str) for x in src))):
            dropped += 1
            continue
        if not isinstance(cell.get("metadata", {}), dict):
            cell = dict(cell, metadata={})
        kept.append(cell)
    nb = {"cells": kept, "metadata": {}, NOTES: [f"{dropped} malformed cell(s) of the notebook file were left out"] if dropped else []}
    return nb, None


def _clean(cell: dict) -> dict:
    cell = copy.deepcopy(cell)
    cell["source"] = source(cell)
    if cell["cell_type"] == "code":
        cell["outputs"] = []
        cell["execution_count"] = None
    else:
        cell.pop("outputs", None)
        cell.pop("execution_count", None)
    cell.setdefault("metadata", {})
    return cell


ESCAPED_MAX_CHARS = 20_000


def html_block(html_text: str) -> str:
    """Sanitised HTML as the source of a Markdown cell that renders as exactly that HTML: one
    line (a CommonMark HTML block, which the Markdown renderer passes through and parses nothing
    in; every newline becomes a character reference, which the browser reads as a newline)."""
    one_line = html_text.replace("\r", "&#13;").replace("\n", "&#10;")
    return f'<div class="learner-text">{one_line}</div>'


def escaped_block(text: str) -> str:
    """Text shown as it is, in a Markdown cell: escaped, in a <pre>, on one line. At most
    ESCAPED_MAX_CHARS characters, so that its rendering stays within what ``sanitise_html`` shows
    as HTML (a longer one would be escaped a second time and read as ``&lt;`` entities)."""
    import html

    cut = text[:ESCAPED_MAX_CHARS]
    return html_block("<pre>" + html.escape(cut) + ("\n... [truncated]" if len(text) > len(cut) else "") + "</pre>")


def _learner_cell(cell: dict) -> dict:
    """A cell the learner added (or one whose grade id is unknown, copied, or repeated): its
    source only, no metadata; a raw cell as escaped text in a Markdown cell."""
    src = source(cell)
    if cell.get("cell_type") == "code":
        return {"cell_type": "code", "source": src, "metadata": {}, "outputs": [], "execution_count": None}
    if cell.get("cell_type") == "markdown":
        return {"cell_type": "markdown", "source": src, "metadata": {}}
    return {"cell_type": "markdown", "source": escaped_block(src), "metadata": {}}


def restore(release: dict, submission: dict | None, problem: str | None = None) -> Restored:
    """The notebook to execute: the learner's answers inside the release's locked structure."""
    if submission is None:
        nb = copy.deepcopy(release)
        nb["cells"] = [_clean(c) for c in nb["cells"]]
        return Restored(_as_notebook(nb), [problem] if problem else [], problem)

    release_cells = release["cells"]
    release_ids = [grade_id(c) for c in release_cells]
    by_id = {gid: c for gid, c in zip(release_ids, release_cells) if gid}
    sub_ids = {grade_id(c) for c in submission["cells"] if grade_id(c)}
    if by_id and not (sub_ids & set(by_id)):
        msg = "this notebook has none of the assignment's graded cells (is it another assignment's notebook?)"
        return restore(release, None, msg)

    notes: list[str] = list(submission.get(NOTES, []))
    out: list[dict] = []
    seen: set[str] = set()
    for cell in submission["cells"]:
        gid = grade_id(cell)
        if gid and gid in by_id and gid not in seen:
            seen.add(gid)
            ref = by_id[gid]
            if is_locked_release_cell(ref):
                edited = source(cell) != source(ref) or cell.get("cell_type") != ref.get("cell_type")
                if edited and not is_demo(ref):  # a demo cell is simply the course's again
                    notes.append(f"the locked cell `{gid}` was edited: it was restored from the release")
                out.append(_clean(ref))
            else:  # an answer: the learner's source, the release's metadata and type
                fixed = _clean(ref)
                fixed["source"] = source(cell)
                out.append(fixed)
        else:
            out.append(_learner_cell(cell))

    # Re-insert deleted release cells after the nearest preceding release cell still present.
    for idx, gid in enumerate(release_ids):
        if not gid or gid in seen:
            continue
        ref = release_cells[idx]
        if is_locked_release_cell(ref):
            if not is_demo(ref):  # a notebook from before demo cells were locked lacks them all
                notes.append(f"the locked cell `{gid}` was deleted: it was restored from the release")
            insert_cell = _clean(ref)
        else:
            notes.append(f"the answer cell `{gid}` was deleted: it was restored empty, as released")
            insert_cell = _clean(ref)
        anchor = None
        for prev in reversed(release_ids[:idx]):
            if prev and any(grade_id(c) == prev for c in out):
                anchor = prev
                break
        pos = 0 if anchor is None else next(i for i, c in enumerate(out) if grade_id(c) == anchor) + 1
        out.insert(pos, insert_cell)
        seen.add(gid)

    nb = {
        "cells": out,
        "metadata": copy.deepcopy(release.get("metadata", {})),  # kernelspec from the release
        "nbformat": 4,
        "nbformat_minor": release.get("nbformat_minor", 5),
    }
    return Restored(_as_notebook(nb), notes, None)


def _as_notebook(nb: dict):
    """An nbformat NotebookNode with fresh, unique cell ids (as nbformat 4.5 wants)."""
    import nbformat

    nb = nbformat.from_dict(nb)
    nb["nbformat"], nb["nbformat_minor"] = 4, max(5, nb.get("nbformat_minor", 5))
    for i, cell in enumerate(nb.cells):
        cell["id"] = f"cell-{i}"
    return nb
