"""A real headless browser for the docs tests: Chromium driven over the DevTools protocol.

The protocol runs over a pipe (`--remote-debugging-pipe`: commands in on fd 3, answers and events
out on fd 4, each JSON message ended by a NUL byte), so nothing beyond the standard library and a
Chromium binary is needed. A page is loaded, its headings are read from the rendered DOM, and what
it reports as errors (console.error, uncaught exceptions, and the browser's own error log, where
a resource that failed to load shows) is collected.
"""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import select
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
TEXTS = "JSON.stringify([...document.querySelectorAll({selector!r})].map(e => e.innerText.trim()))"
"""The visible texts of the elements a CSS selector finds."""


def find_chromium() -> str | None:
    """The path of a Chromium (or Chrome) binary, or None."""
    for name in NAMES:
        if path := shutil.which(name):
            return path
    return None


@dataclass
class Page:
    """What a loaded page showed and said."""

    url: str
    title: str
    headings: list[str]
    """The h1 and h2 headings, in order, without their permalink signs."""
    found: dict[str, list[str]] = field(default_factory=dict)
    """The texts of the elements each extra selector found."""
    errors: list[str] = field(default_factory=list)


class Chromium:
    """One headless Chromium process, spoken to over the DevTools pipe."""

    def __init__(self, binary: str, profile: Path) -> None:
        to_browser_r, to_browser_w = os.pipe()
        from_browser_r, from_browser_w = os.pipe()
        flags = ["--headless", "--disable-gpu", "--remote-debugging-pipe", "--no-first-run"]
        flags += ["--no-default-browser-check", f"--user-data-dir={profile}", "about:blank"]
        if os.geteuid() == 0:
            flags.append("--no-sandbox")  # Chromium refuses to run its sandbox as root
        # The pipe ends arrive as stdin and stdout and move to fds 3 and 4, where Chromium looks.
        self.proc = subprocess.Popen(
            ["sh", "-c", 'exec "$0" "$@" 3<&0 4>&1 </dev/null >/dev/null', binary, *flags],
            stdin=to_browser_r,
            stdout=from_browser_w,
            stderr=subprocess.DEVNULL,
        )
        os.close(to_browser_r)
        os.close(from_browser_w)
        self.send_fd, self.recv_fd = to_browser_w, from_browser_r
        self.buffer = b""
        self.next_id = 0
        self.events: list[dict[str, Any]] = []

    def close(self) -> None:
        with contextlib.suppress(OSError, TimeoutError):
            self.call("Browser.close", timeout=5)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=10)
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        os.close(self.send_fd)
        os.close(self.recv_fd)

    def _read(self, deadline: float) -> dict[str, Any] | None:
        """The next message, or None when the deadline passes first."""
        while b"\0" not in self.buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.recv_fd], [], [], left)[0]:
                return None
            chunk = os.read(self.recv_fd, 1 << 16)
            if not chunk:
                raise OSError("Chromium closed its DevTools pipe")
            self.buffer += chunk
        message, _, self.buffer = self.buffer.partition(b"\0")
        return json.loads(message)

    def call(
        self, method: str, params: dict | None = None, session: str = "", timeout: float = 30
    ) -> dict[str, Any]:
        """Send one command and return its result; events that arrive meanwhile are kept."""
        self.next_id += 1
        message: dict[str, Any] = {"id": self.next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self.send_fd, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while (reply := self._read(deadline)) is not None:
            if reply.get("id") == self.next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)
        raise TimeoutError(f"{method}: no answer within {timeout} s")

    def wait_for(self, method: str, timeout: float) -> bool:
        """Whether the event `method` arrived (or had arrived) within `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while not any(e.get("method") == method for e in self.events):
            event = self._read(deadline)
            if event is None:
                return False
            self.events.append(event)
        return True

    def settle(self, seconds: float) -> None:
        """Keep the events of the next `seconds` (scripts that run after the load)."""
        deadline = time.monotonic() + seconds
        while (event := self._read(deadline)) is not None:
            self.events.append(event)

    def load(self, url: str, selectors: tuple[str, ...] = (), settle_s: float = 1.5) -> Page:
        """Open `url` in a new tab, wait for its load event and what follows it, and read its
        headings and the texts of the elements each of `selectors` finds."""
        target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        attached = self.call("Target.attachToTarget", {"targetId": target, "flatten": True})
        session = attached["sessionId"]
        for domain in ("Runtime", "Log", "Page"):
            self.call(f"{domain}.enable", session=session)
        self.events.clear()
        self.call("Page.navigate", {"url": url}, session=session)
        if not self.wait_for("Page.loadEventFired", timeout=30):
            raise TimeoutError(f"{url}: no load event within 30 s")
        self.settle(settle_s)
        title = self._evaluate("document.title", session)
        texts = {s: self._texts(s, session) for s in selectors}
        headings = self._texts("h1, h2", session)
        errors = [e for ev in self.events if (e := error_of(ev))]
        self.call("Target.closeTarget", {"targetId": target})
        headings = [h.removesuffix("¶").strip() for h in headings]
        return Page(url=url, title=title, headings=headings, found=texts, errors=errors)

    def _texts(self, selector: str, session: str) -> list[str]:
        return json.loads(self._evaluate(TEXTS.format(selector=selector), session))

    def _evaluate(self, expression: str, session: str) -> Any:
        params = {"expression": expression, "returnByValue": True}
        return self.call("Runtime.evaluate", params, session=session)["result"]["value"]


def error_of(event: dict[str, Any]) -> str:
    """The error an event reports, in one line; empty when it reports none."""
    params = event.get("params", {})
    if event.get("method") == "Runtime.consoleAPICalled" and params["type"] in ("error", "assert"):
        args = [str(a.get("value", a.get("description", ""))) for a in params.get("args", [])]
        return f"console.{params['type']}: {' '.join(args)}"
    if event.get("method") == "Runtime.exceptionThrown":
        details = params["exceptionDetails"]
        return f"uncaught: {details.get('exception', {}).get('description') or details['text']}"
    if event.get("method") == "Log.entryAdded" and params["entry"]["level"] == "error":
        entry = params["entry"]
        return f"{entry['source']}: {entry['text']} {entry.get('url', '')}".strip()
    return ""


@contextlib.contextmanager
def serving(root: Path) -> Iterator[str]:
    """A local HTTP server for the folder `root`, on a free port; yields its base URL."""
    handler = partial(QuietHandler, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass
