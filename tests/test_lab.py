"""`make lab` works: started headless exactly as a learner starts it (plus a port, a token and
--no-browser), JupyterLab answers its API over loopback, serves the course and nbgrader's
extension, and stops."""
import json
import os
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.slow


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str, token: str):
    req = urllib.request.Request(url, headers={"Authorization": f"token {token}"})
    with urllib.request.urlopen(req, timeout=5) as r:
        return r.status, r.read().decode()


def test_exchange_is_inside_the_course_and_writable():
    """nbgrader's exchange is configured inside the course, so formgrader starts without a warning."""
    from traitlets.config import Config

    c = Config()
    code = (ROOT / "grader" / "nbgrader_config.py").read_text()
    exec(compile(code, str(ROOT / "grader" / "nbgrader_config.py"), "exec"),
         {"get_config": lambda: c, "__file__": str(ROOT / "grader" / "nbgrader_config.py")})
    root = Path(c.Exchange.root)
    assert root == ROOT / "grader" / "work" / "exchange"
    assert root.is_dir() and os.access(root, os.W_OK | os.X_OK)
    assert subprocess.run(["git", "check-ignore", "-q", str(root)], cwd=ROOT).returncode == 0


def test_lab_starts_and_answers(tmp_path):
    port, token = _free_port(), "course-test-token"
    env = dict(os.environ, JUPYTER_RUNTIME_DIR=str(tmp_path))
    cmd = ["make", "--no-print-directory", "lab", f"PORT={port}",
           f"LAB_ARGS=--no-browser --ip=127.0.0.1 --ServerApp.token={token}"]
    log = open(tmp_path / "lab.log", "w")
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    try:
        deadline, status = time.time() + 120, None
        while time.time() < deadline:
            try:
                status = _get(f"http://127.0.0.1:{port}/api/status", token)
                break
            except OSError:
                time.sleep(0.5)
        assert status and status[0] == 200, "`make lab` did not answer /api/status within 120 s"
        code, body = _get(f"http://127.0.0.1:{port}/api/contents/notebooks", token)
        names = [c["name"] for c in json.loads(body)["content"]]
        assert "03_scaled_dot_product_attention" in names
        code, body = _get(f"http://127.0.0.1:{port}/lab/api/extensions", token)
        assert "nbgrader" in body, "nbgrader's JupyterLab extension is not available"
        code, body = _get(f"http://127.0.0.1:{port}/formgrader", token)
        assert code == 200
        if Path("/usr/share/javascript/mathjax/MathJax.js").exists():  # Debian's libjs-mathjax (make test installs it)
            code, body = _get(f"http://127.0.0.1:{port}/static/mathjax/MathJax.js", token)
            assert code == 200 and "MathJax" in body[:5000], "MathJax is not served by the course's own server"
        time.sleep(1)
        logged = (tmp_path / "lab.log").read_text()
        assert "CRITICAL" not in logged and "exchange" not in logged.lower(), logged[-3000:]
    finally:
        os.killpg(proc.pid, signal.SIGTERM)  # make and the jupyter server it started
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)


def test_formgrader_pages_load_mathjax_from_the_course_server(tmp_path):
    """formgrader renders a submission with nbconvert's HTMLExporter and its 'formgrade' template,
    whose MathJax comes from a CDN; the course's template override (JUPYTER_PATH=grader/jupyter)
    makes a formgrader page load it from the course's own server instead (offline grading)."""
    script = (
        "import nbformat\n"
        "from traitlets.config import Config\n"
        "from nbconvert.exporters import HTMLExporter\n"
        "from nbgrader.server_extensions.formgrader import handlers\n"
        "c = Config()\n"
        "c.HTMLExporter.template_name = 'formgrade'\n"
        "c.HTMLExporter.extra_template_basedirs = [handlers.template_path]\n"
        "nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell('$$e^{i\\\\pi} + 1 = 0$$')])\n"
        "html, _ = HTMLExporter(config=c).from_notebook_node(nb, resources={'base_url': '/', 'notebook_id': 'x', 'index': 0, 'total': 1})\n"
        "print(html)\n")
    env = dict(os.environ, JUPYTER_PATH=str(ROOT / "grader" / "jupyter"))
    html = subprocess.run([os.sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120,
                          check=True).stdout
    assert 'path.indexOf("/formgrader/")' in html and "static/mathjax/MathJax.js" in html
    assert '<script src="https://cdnjs' not in html  # the CDN is only the fallback of pages opened from disk
