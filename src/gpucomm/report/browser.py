"""Open an HTML report in headless Chromium and see what a reader sees: did every chart draw,
did anything log an error, and a screenshot of the whole page.

Chromium is driven over the DevTools protocol on a pipe (`--remote-debugging-pipe`: JSON
messages separated by NUL bytes on file descriptors 3 and 4), so no Python package and no
network port is needed, and one browser launch gives the page's state, its console and the
screenshot.

    >>> view = open_in_browser("report.html", screenshot="report.png")   # doctest: +SKIP
    >>> view.status["drawn"] == view.status["charts"], view.errors       # doctest: +SKIP
    (True, [])
"""
from __future__ import annotations

import base64
import json
import os
import select
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import ConfigError

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome")
_WAIT_RENDERED = """new Promise(function (done) {
  (function poll() {
    if (document.body && document.body.getAttribute('data-rendered'))
      done(document.getElementById('gpucomm-status').textContent);
    else setTimeout(poll, 50);
  })();
})"""


@dataclass
class PageView:
    status: dict  # the report's own {"charts", "drawn", "errors"}
    errors: list = field(default_factory=list)  # console errors and uncaught exceptions
    screenshot: bytes = b""
    size: tuple = (0, 0)  # page width, height in CSS pixels
    sections: list = field(default_factory=list)  # top of each report section, CSS pixels


def find_browser() -> str | None:
    """A Chromium-family browser on PATH ($GPUCOMM_BROWSER first), or None."""
    for name in (os.environ.get("GPUCOMM_BROWSER"),) + BROWSERS:
        if name and shutil.which(name):
            return shutil.which(name)
    return None


def open_in_browser(path, *, screenshot=None, width=1280, height=900, timeout_s=120.0,
                    browser=None) -> PageView:
    """Load `path`, wait until its charts have drawn, collect errors, optionally save a
    full-page PNG to `screenshot`."""
    exe = browser or find_browser()
    if exe is None:
        raise ConfigError("no Chromium browser found: install Debian's `chromium` package "
                          "(apt-get install chromium) or set GPUCOMM_BROWSER")
    url = Path(path).resolve().as_uri()
    with tempfile.TemporaryDirectory(prefix="gpucomm-chromium-") as profile:
        flags = ["--headless", "--remote-debugging-pipe", "--no-sandbox", "--disable-gpu",
                 "--disable-dev-shm-usage", "--no-first-run", "--disable-extensions",
                 "--disable-background-networking", "--mute-audio", "--hide-scrollbars",
                 f"--user-data-dir={profile}", f"--window-size={width},{height}"]
        # fd 3: what the browser reads, fd 4: what it writes (our stdin/stdout pipes)
        proc = subprocess.Popen(
            ["sh", "-c", 'exec "$0" "$@" 3<&0 4>&1 </dev/null >/dev/null', exe, *flags],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            start_new_session=True)  # its own process group: renderers go with it
        cdp = _Pipe(proc, time.monotonic() + timeout_s)
        try:
            return _view(cdp, url, screenshot, width, height)
        finally:
            cdp.close()


def _view(cdp, url, screenshot, width, height) -> PageView:
    target = cdp.call("Target.createTarget", {"url": "about:blank"})["targetId"]
    cdp.session = cdp.call("Target.attachToTarget", {"targetId": target,
                                                     "flatten": True})["sessionId"]
    for domain in ("Page", "Runtime", "Log"):
        cdp.call(f"{domain}.enable")
    cdp.call("Emulation.setDeviceMetricsOverride", {"width": width, "height": height,
                                                    "deviceScaleFactor": 1, "mobile": False})
    cdp.call("Page.navigate", {"url": url})
    cdp.wait_event("Page.loadEventFired")
    out = cdp.call("Runtime.evaluate", {"expression": _WAIT_RENDERED, "awaitPromise": True,
                                        "returnByValue": True})
    if "exceptionDetails" in out:
        raise ConfigError(f"{url}: the page's state could not be read: "
                          f"{out['exceptionDetails'].get('text')}")
    status = json.loads(out["result"]["value"])
    tops = cdp.call("Runtime.evaluate", {"returnByValue": True, "expression":
                    "Array.from(document.querySelectorAll('section.entry'))"
                    ".map(function (s) { return s.offsetTop; })"})["result"].get("value", [])
    size = cdp.call("Page.getLayoutMetrics")["cssContentSize"]
    w, h = int(size["width"]), int(size["height"])
    png = b""
    if screenshot is not None:
        shot = cdp.call("Page.captureScreenshot", {
            "format": "png", "captureBeyondViewport": True,
            "clip": {"x": 0, "y": 0, "width": w, "height": h, "scale": 1}})
        png = base64.b64decode(shot["data"])
        Path(screenshot).write_bytes(png)
    return PageView(status, list(cdp.errors), png, (w, h), tops)


class _Pipe:
    """DevTools protocol over the browser's pipe: calls, and the events seen meanwhile."""

    def __init__(self, proc, deadline):
        self.proc, self.deadline = proc, deadline
        self.session = None
        self.next_id = 0
        self.buf = b""
        self.events = []
        self.errors = []

    def call(self, method, params=None) -> dict:
        self.next_id += 1
        msg = {"id": self.next_id, "method": method, "params": params or {}}
        if self.session:
            msg["sessionId"] = self.session
        self.proc.stdin.write(json.dumps(msg).encode() + b"\0")
        self.proc.stdin.flush()
        while True:
            m = self._read()
            if m.get("id") == self.next_id:
                if "error" in m:
                    raise ConfigError(f"browser: {method} failed: {m['error'].get('message')}")
                return m.get("result", {})

    def wait_event(self, name) -> dict:
        for i, m in enumerate(self.events):
            if m["method"] == name:
                return self.events.pop(i)
        while True:
            m = self._read()
            if m.get("method") == name:
                self.events.remove(m)
                return m

    def _read(self) -> dict:
        while b"\0" not in self.buf:
            left = self.deadline - time.monotonic()
            if left <= 0:
                raise ConfigError("browser: no answer before the timeout (is the page huge, "
                                  "or did a chart never draw?)")
            ready, _, _ = select.select([self.proc.stdout], [], [], left)
            if ready:
                chunk = os.read(self.proc.stdout.fileno(), 1 << 20)
                if not chunk:
                    raise ConfigError(f"browser exited (status {self.proc.poll()}) before "
                                      "answering")
                self.buf += chunk
        raw, self.buf = self.buf.split(b"\0", 1)
        m = json.loads(raw)
        if "method" in m:
            self._note(m)
            self.events.append(m)
        return m

    def _note(self, m) -> None:
        p = m.get("params", {})
        if m["method"] == "Runtime.exceptionThrown":
            d = p.get("exceptionDetails", {})
            self.errors.append("exception: " + str(d.get("exception", {}).get("description")
                                                   or d.get("text")))
        elif m["method"] == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
            self.errors.append("console.error: " + " ".join(
                str(a.get("value", a.get("description", ""))) for a in p.get("args", [])))
        elif m["method"] == "Log.entryAdded" and p.get("entry", {}).get("level") == "error":
            self.errors.append("log: " + str(p["entry"].get("text")))

    def close(self) -> None:
        try:
            if self.proc.poll() is None:
                self.session = None
                self.proc.stdin.write(json.dumps({"id": 0, "method": "Browser.close"}).encode()
                                      + b"\0")
                self.proc.stdin.flush()
                self.proc.wait(timeout=10)
        except (OSError, subprocess.TimeoutExpired, ValueError):
            pass
        finally:
            if self.proc.poll() is None:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
