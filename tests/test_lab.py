"""The interactive path, tested the way a user takes it: JupyterLab on a fresh tiny run, one
section opened from the file browser (its jupytext `.py`, which must open as a notebook), every
cell run from the Run menu, and the section's result table found in the page."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.browser import Browser, free_port, wait_for_port
from tests.conftest import skip_or_fail_in_ci

ROOT = Path(__file__).resolve().parent.parent
SECTION = "03_correlations"


def _click(browser: Browser, element_js: str, clicks: int = 1) -> None:
    """Move to the element `element_js` evaluates to and click it (`clicks` = 2: a double click)."""
    x, y = browser.evaluate(f"(() => {{ const r = ({element_js}).getBoundingClientRect(); "
                            "return [r.x + r.width / 2, r.y + r.height / 2]; })()")
    browser.call("Input.dispatchMouseEvent", {"type": "mouseMoved", "x": x, "y": y}, session=True)
    time.sleep(0.3)  # Lumino menus open their item on hover, then act on the release
    for count in range(1, clicks + 1):
        for kind in ("mousePressed", "mouseReleased"):
            browser.call("Input.dispatchMouseEvent", {"type": kind, "x": x, "y": y, "button": "left",
                                                       "clickCount": count}, session=True)


def _by_text(selector: str, text: str) -> str:
    return f"[...document.querySelectorAll('{selector}')].find(e => e.innerText.trim() === '{text}')"


PROMPTS = "[...document.querySelectorAll('.jp-CodeCell .jp-InputArea-prompt')].map(e => e.textContent)"


def _run_all_cells(browser: Browser, attempts: int = 5) -> bool:
    """Run > Run All Cells, again if no cell was queued within 20 s (a synthetic click on the menu is lost now
    and then, in a full test run more often than alone: every prompt stays '[ ]:'); whether any cell started."""
    for attempt in range(attempts):
        if attempt:
            time.sleep(2.0)  # let a closed menu and the notebook settle before the next try
        _click(browser, _by_text(".lm-MenuBar-itemLabel", "Run"))
        if not browser.poll(f"!!{_by_text('.lm-Menu-itemLabel', 'Run All Cells')}"):   # the menu did not open
            browser.call("Input.dispatchKeyEvent", {"type": "keyDown", "key": "Escape"}, session=True)
            continue
        time.sleep(1.0)  # the menu lays itself out
        _click(browser, _by_text(".lm-Menu-itemLabel", "Run All Cells"))
        started = browser.poll(PROMPTS, done=lambda v: any(p != "[ ]:" for p in v or []), tries=100)
        if any(p != "[ ]:" for p in started or []):
            return True
        browser.call("Input.dispatchKeyEvent", {"type": "keyDown", "key": "Escape"}, session=True)  # close a stuck menu
    return False


@pytest.mark.slow
def test_a_section_opens_from_the_file_browser_as_a_notebook_and_runs_in_jupyterlab(built_book, tmp_path):
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        skip_or_fail_in_ci("chromium is not installed (apt-get install -y chromium)")
    lab_exe = Path(sys.executable).parent / "jupyter-lab"
    if not lab_exe.exists():
        skip_or_fail_in_ci("JupyterLab is not installed in this environment (make venv installs it)")
    overrides = Path(sys.prefix) / "share" / "jupyter" / "lab" / "settings" / "overrides.json"
    assert overrides.exists(), f"{overrides} is missing: `make venv` installs the jupytext default viewer there"
    # A user's copy of the project: the section, the pairing settings, and the tiny runs it reads
    # (copied, so that running the section here cannot touch the fixture's run).
    project = tmp_path / "project"
    (project / "notebooks").mkdir(parents=True)
    shutil.copy(ROOT / "notebooks" / f"{SECTION}.py", project / "notebooks")
    shutil.copy(ROOT / "jupytext.toml", project)
    runs = tmp_path / "runs"
    shutil.copytree(built_book["pipe"].root, runs / "tiny")
    port = free_port()
    # the notebook's `profile = None` takes $TWOTOWER_PROFILE, as on Binder (binder/start)
    env = {**os.environ, "TWOTOWER_RUNS": str(runs), "TWOTOWER_PROFILE": "tiny", "HF_HUB_OFFLINE": "1",
           "JUPYTER_CONFIG_DIR": str(tmp_path / "cfg")}
    lab = subprocess.Popen([str(lab_exe), "--no-browser", f"--port={port}", "--ServerApp.ip=127.0.0.1", "--allow-root",
                            "--IdentityProvider.token=", "--ServerApp.password=", f"--ServerApp.root_dir={project}",
                            "--LabApp.news_url=None"],
                           env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    browser, t0 = None, time.time()
    try:
        assert wait_for_port(port, 60), "JupyterLab did not start"
        browser = Browser(chromium)
        browser.call("Page.navigate", {"url": f"http://127.0.0.1:{port}/lab/tree/notebooks"}, session=True)
        listed = browser.poll(f"!!{_by_text('.jp-DirListing-itemText', f'{SECTION}.py')}", tries=300)
        assert listed, "the section's .py is not in JupyterLab's file browser"
        _click(browser, _by_text(".jp-DirListing-itemText", f"{SECTION}.py"), clicks=2)
        cells = browser.poll("document.querySelectorAll('.jp-NotebookPanel .jp-Cell').length", tries=300) or 0
        as_text = browser.evaluate("document.querySelectorAll('.jp-FileEditor').length")
        assert cells > 0 and not as_text, "the .py opened in the text editor, not as a notebook"
        idle = browser.poll("(document.querySelector('.jp-Notebook-ExecutionIndicator') || {dataset: {}}).dataset.status",
                            done=lambda v: v == "idle", tries=300)
        assert idle == "idle", f"the kernel did not start (status {idle!r})"
        assert _run_all_cells(browser), "Run All Cells queued no cell"
        # every code cell has run when none is queued or running and the last one has a number
        prompts = browser.poll(PROMPTS, done=lambda v: bool(v) and "[*]:" not in v and v[-1] not in ("", "[ ]:"), tries=900)
        errors = browser.evaluate("[...document.querySelectorAll('[data-mime-type=\"application/vnd.jupyter.error\"]')]"
                                  ".map(e => e.textContent.slice(-500))")
        tables = browser.poll("document.querySelectorAll('.jp-OutputArea-output table.tt-paper-table').length") or 0
        pair_rows = browser.evaluate("[...document.querySelectorAll('.jp-OutputArea-output table.tt-paper-table tr')]"
                                     ".map(tr => tr.textContent)")
    finally:
        if browser is not None:
            browser.close()
        lab.terminate()
        lab.wait(20)
    print(f"JupyterLab: {SECTION} opened and run in {time.time() - t0:.1f} s")
    assert not errors, errors
    assert prompts and all(p.startswith("[") and p[1:-2].isdigit() for p in prompts), prompts
    assert tables >= 2, "Table 2 (the matrix and the pairs) is not in the page"
    assert any("GPT vs Bert-large-run1" in row and "0.57" in row for row in pair_rows), pair_rows  # the paper's r beside ours
    assert (runs / "tiny" / "correlations" / "section.json").stat().st_mtime > t0  # it ran on the copied run
