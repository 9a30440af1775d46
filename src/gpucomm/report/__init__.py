"""Reports of results: Chrome/Perfetto traces of simulated timelines with per-link counter
tracks (trace.py, links.py), sweep plots (plot.py), and one self-contained HTML report of any
command's JSON result (html.py, figures.py, data.py), checked in headless Chromium
(browser.py)."""
