"""``dlvirt compare``'s HTML page rendered in a real headless Chromium (the comparison itself:
tests/unit/test_compare.py)."""

import re
import shutil
import subprocess

import pytest

from conftest import CHROMIUM_FLAGS, compare_study
from dlvirt.cli import main

# Added to a copy of the page only: after load, record the figure's drawn size in the DOM.
SVG_PROBE = """<script>window.addEventListener("load", () => { const b = document.querySelector("figure svg")
  .getBoundingClientRect(); document.body.setAttribute("data-svg", `${Math.round(b.width)}x${Math.round(b.height)}`);
});</script>"""


def test_the_html_page_renders_in_chromium(tmp_path):
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.skip("Debian's chromium is not installed (setup.sh installs it)")
    a = compare_study(tmp_path / "a")
    b = compare_study(tmp_path / "b", scale={"CN/1/VNL/CPU": 1.3}, seed=1)
    main(["compare", str(a), str(b), "--out", str(tmp_path / "out")])
    probed = tmp_path / "probed.html"
    probed.write_text((tmp_path / "out" / "compare.html").read_text().replace("</body>", SVG_PROBE + "</body>"))
    proc = subprocess.run([chromium, *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom",
                           probed.as_uri()], capture_output=True, text=True, timeout=120)
    match = re.search(r'data-svg="(\d+)x(\d+)"', proc.stdout)
    assert match, f"no figure probe in Chromium's DOM (rc {proc.returncode}): {proc.stderr[-2000:]}"
    assert int(match.group(1)) >= 400 and int(match.group(2)) >= 100
