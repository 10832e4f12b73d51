"""Execute one notebook, cell by cell. Runs INSIDE the sandbox (copied into its scratch folder).

Usage: python _execute.py IN.ipynb OUT.ipynb CELL_TIMEOUT [RENDER.json RENDERED.json]

Before anything runs, the learner's Markdown cells listed in RENDER.json (their indices) are
rendered to HTML by nbconvert's own Markdown renderer, here, under the sandbox's limits, and
written to RENDERED.json ({index: html}); a ``text/markdown`` output of a cell is rendered the same
way into a ``text/html`` beside it. Rendering untrusted Markdown is work whose cost the learner
controls: the grader's own process only sanitises the HTML that comes back (with a linear,
size-bounded allow-list sanitiser), and never parses learner Markdown itself.

Every code cell ends with either its real outputs or a synthetic error saying why it did not run
(time limit, the kernel died, ...): a grade cell must never be left without outputs, because
nbgrader would score an unexecuted test cell as passed. Outputs are truncated so a 100 MB print
cannot bloat the notebook.
"""
import sys
import time

sys.modules.setdefault("rfc3987_syntax", None)  # 1.6 s of lark grammars nbformat never needs (grader/__init__.py)

import nbformat  # noqa: E402
from nbclient import NotebookClient  # noqa: E402
from nbclient.exceptions import CellTimeoutError, DeadKernelError

MAX_OUTPUT_CHARS = 10_000
MAX_MARKDOWN_CHARS = 200_000
WARM_UP_SECONDS = 300  # the warm-up's own limit: never the cell limit, so it is never interrupted
WARM_UP = """# grader warm-up
import torch, utils.checks
from utils._clock import defer_interrupts_during_imports as _defer
get_ipython().events.register("pre_run_cell", lambda *_, _defer=_defer: _defer())
del _defer
"""


def error_output(ename, evalue):
    return nbformat.v4.new_output("error", ename=ename, evalue=evalue, traceback=[f"{ename}: {evalue}"])


def render_markdown(text: str) -> str:
    """Markdown to HTML as nbconvert renders it in formgrader and the feedback (mistune, with
    its math kept for MathJax)."""
    from nbconvert.filters.markdown_mistune import markdown2html_mistune

    return markdown2html_mistune(text)


def render_cells(nb, render_path: str, out_path: str) -> None:
    import json

    with open(render_path, encoding="utf-8") as f:
        wanted = json.load(f)
    rendered = {}
    for i in wanted:
        cell = nb.cells[i] if isinstance(i, int) and 0 <= i < len(nb.cells) else None
        if cell is not None and cell.cell_type == "markdown":
            try:
                rendered[str(i)] = render_markdown(cell.source)
            except Exception:  # noqa: BLE001 - the grader shows this cell as plain text
                pass
    with open(out_path, "w", encoding="utf-8") as f:
        json.dump(rendered, f)


def truncate(cell):
    for out in cell.get("outputs", []):
        data = out.get("data", {})
        if "text/markdown" in data and "text/html" not in data:
            try:
                text = "".join(data["text/markdown"])
                data["text/html"] = render_markdown(text[:MAX_MARKDOWN_CHARS])
            except Exception:  # noqa: BLE001 - shown as text
                pass
        if out.get("output_type") == "stream":
            text = out.get("text", "")
            if len(text) > MAX_OUTPUT_CHARS:
                out["text"] = text[:MAX_OUTPUT_CHARS] + f"\n... [output truncated: {len(text)} characters]\n"
        for key in ("text/plain", "text/html"):
            data = out.get("data", {})
            if key in data and len("".join(data[key])) > MAX_OUTPUT_CHARS:
                data[key] = "".join(data[key])[:MAX_OUTPUT_CHARS] + "\n... [output truncated]"
        if out.get("output_type") == "error":
            out["traceback"] = [line[:MAX_OUTPUT_CHARS] for line in out.get("traceback", [])[-40:]]


def main(src, dst, cell_timeout, render=None, rendered=None):
    nb = nbformat.read(src, as_version=4)
    if render and rendered:
        render_cells(nb, render, rendered)
    # shutdown_kernel="immediate": the kernel is killed at the end rather than asked to exit
    # (a graceful shutdown waits about 1.5 s for nothing: the sandbox is thrown away).
    client = NotebookClient(nb, timeout=cell_timeout, allow_errors=True, interrupt_on_timeout=True,
                            kernel_name="python3", record_timing=False, shutdown_kernel="immediate",
                            resources={"metadata": {"path": "."}})
    code_cells = [i for i, c in enumerate(nb.cells) if c.cell_type == "code"]
    dead = None
    written = time.monotonic()
    try:
        with client.setup_kernel():
            # Warm-up, not part of the notebook: torch and the checks load now, not inside the
            # first cell's time limit; and from now on an interrupt (a cell past its limit) waits
            # for a running import to finish, so it never leaves a module half-initialised.
            # nbclient stores the cell it executed at the index it is given (nb.cells[index] = cell):
            # the warm-up is given an index past the notebook's end and the notebook's cell list is
            # put back afterwards, so no cell of the notebook is replaced by it.
            warm = nbformat.v4.new_code_cell(WARM_UP)
            cells = list(nb.cells)
            nb.cells.append(warm)
            client.timeout = WARM_UP_SECONDS
            try:
                client.execute_cell(warm, len(nb.cells) - 1, store_history=False)
            except Exception:  # noqa: BLE001 - the notebook runs all the same
                pass
            client.timeout = cell_timeout
            nb.cells[:] = cells
            for i in code_cells:
                cell = nb.cells[i]
                if dead:
                    cell.outputs = [error_output("NotExecuted", dead)]
                    continue
                try:
                    client.execute_cell(cell, i)
                except CellTimeoutError:
                    cell.outputs.append(error_output("TimeoutError", f"this cell exceeded the {cell_timeout} s limit per cell"))
                except DeadKernelError:
                    dead = "the kernel died (it crashed, exited or ran out of memory) before this cell ran"
                    cell.outputs.append(error_output("DeadKernelError", "the kernel died while running this cell"))
                except Exception as err:  # nbclient's own failure: record it, never stop
                    cell.outputs.append(error_output(type(err).__name__, str(err)[:2000]))
                truncate(cell)
                if time.monotonic() - written > 0.5:  # progress so far, in case the sandbox is killed
                    nbformat.write(nb, dst)  # (not after every cell: a write costs ~20 ms, a cell often less)
                    written = time.monotonic()
    except Exception as err:  # the kernel could not start, or shutting it down failed
        for i in code_cells:
            if not nb.cells[i].get("outputs"):
                nb.cells[i].outputs = [error_output("NotExecuted", f"the kernel failed: {str(err)[:500]}")]
    nbformat.write(nb, dst)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), *sys.argv[4:6])
