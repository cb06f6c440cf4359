"""The demo's report.html in a real browser (headless Chromium from the system packages; skipped without it):
every image loads, no console error, the tables are visible, and a screenshot is saved in the run directory."""

import json
import shutil
import subprocess

import pytest

from obliviate.cli.main import main

from test_compare import SMALL

CHROMIUM = next((shutil.which(b) for b in ("chromium", "chromium-browser", "google-chrome", "chrome")
                 if shutil.which(b)), None)

CHECK = """<script>
window.addEventListener('load', () => {
  const imgs = [...document.images];
  const broken = imgs.filter(i => !i.complete || i.naturalWidth === 0).length;
  const tables = [...document.querySelectorAll('table')];
  const hidden = tables.filter(t => t.getBoundingClientRect().width === 0).length;
  const wide = tables.filter(t => t.parentElement.scrollWidth > document.body.clientWidth + 2
                                  && getComputedStyle(t.parentElement).overflowX !== 'auto').length;
  document.title = 'CHECK ' + JSON.stringify({images: imgs.length, broken, tables: tables.length, hidden, wide});
});
</script>"""


@pytest.mark.slow
@pytest.mark.skipif(CHROMIUM is None, reason="no Chromium on this machine")
def test_report_in_headless_chromium(tmp_path):
    out = tmp_path / "demo"
    assert main(["demo", "--out", str(out), "--seed", "1", "--no-progress", *SMALL]) == 0
    html = (out / "report.html").read_text()
    probe = out / "report_check.html"
    probe.write_text(html.replace("</body>", CHECK + "</body>"))
    flags = [CHROMIUM, "--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1280,2400",
             "--enable-logging=stderr", "--v=0"]
    dom = subprocess.run([*flags, "--dump-dom", probe.as_uri()], capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    title = dom.stdout.split("<title>", 1)[1].split("</title>", 1)[0]
    assert title.startswith("CHECK "), title
    check = json.loads(title[len("CHECK "):])
    assert check["images"] == 4 and check["broken"] == 0, check
    assert check["tables"] >= 2 and check["hidden"] == 0 and check["wide"] == 0, check
    assert "Uncaught" not in dom.stderr and "CONSOLE" not in dom.stderr, dom.stderr[-2000:]
    shot = out / "report.png"
    r = subprocess.run([*flags, f"--screenshot={shot}", (out / "report.html").as_uri()], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0 and shot.stat().st_size > 10_000, r.stderr[-2000:]
