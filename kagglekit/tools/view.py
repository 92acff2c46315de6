"""``make view``: the executed notebook as a person sees it: HTML (nbconvert), and a PNG
screenshot where a headless Chromium is installed."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path


def view(notebooks: list[Path], runs: Path, latest) -> int:
    """Each notebook's last successful run (``latest(folder)``) rendered; 1 when one has none."""
    for nb in notebooks:
        executed = latest(runs / nb.stem) / nb.name
        if not executed.exists():
            print(f"{nb.stem}: no executed notebook at {executed} (make run NB={nb.stem})",
                  file=sys.stderr)
            return 1
        html = executed.with_suffix(".html")
        subprocess.run([sys.executable, "-m", "nbconvert", "--to", "html", "--log-level", "ERROR",
                        str(executed), "--output", html.name], check=True)
        print(f"{nb.stem}: {html}")
        browser = next((b for b in ("chromium", "chromium-browser", "google-chrome")
                        if shutil.which(b)), None)
        if browser is None:
            print("  (no headless Chromium here: open the HTML file in a browser)")
            continue
        png = html.with_suffix(".png")
        subprocess.run([browser, "--headless", "--no-sandbox", "--hide-scrollbars",
                        f"--screenshot={png.resolve()}", "--window-size=1200,6000",
                        html.resolve().as_uri()], check=True, capture_output=True)
        print(f"{nb.stem}: {png}")
    return 0
