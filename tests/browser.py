"""Headless Chromium for the browser tests (the built book, JupyterLab): driven over the DevTools
protocol on a pipe, with every outside host unreachable. No package beyond Debian's chromium."""

from __future__ import annotations

import json
import os
import select
import socket
import subprocess
import tempfile
import time


class Browser:
    """Headless Chromium driven over the DevTools protocol on a pipe (no extra packages)."""

    def __init__(self, executable: str):
        cmd_r, self._cmd_w = os.pipe()
        self._evt_r, evt_w = os.pipe()

        def fds() -> None:  # Chromium reads commands on fd 3 and writes replies on fd 4
            a, b = os.dup(cmd_r), os.dup(evt_w)
            os.dup2(a, 3)
            os.dup2(b, 4)

        self.proc = subprocess.Popen(
            [executable, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
             "--no-first-run", f"--user-data-dir={tempfile.mkdtemp()}", "--remote-debugging-pipe",
             "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1", "--window-size=1280,1000", "about:blank"],
            pass_fds=(3, 4), preexec_fn=fds, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(cmd_r)
        os.close(evt_w)
        self._buf, self._id, self.events = b"", 0, []
        target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        self.session = self.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Page", "Network", "Runtime", "Log"):
            self.call(f"{domain}.enable", session=True)

    def _recv(self, timeout: float) -> dict | None:
        end = time.time() + timeout
        while b"\0" not in self._buf:
            ready, _, _ = select.select([self._evt_r], [], [], max(0.0, end - time.time()))
            if not ready:
                return None
            chunk = os.read(self._evt_r, 1 << 20)
            if not chunk:
                return None
            self._buf += chunk
        msg, self._buf = self._buf.split(b"\0", 1)
        return json.loads(msg)

    def call(self, method: str, params: dict | None = None, session: bool = False, timeout: float = 30) -> dict:
        self._id += 1
        msg = {"id": self._id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = self.session
        os.write(self._cmd_w, json.dumps(msg).encode() + b"\0")
        while True:
            reply = self._recv(timeout)
            if reply is None:
                raise TimeoutError(f"Chromium did not answer {method}")
            if reply.get("id") == self._id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply["result"]
            self.events.append(reply)

    def evaluate(self, expression: str):
        return self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True}, session=True)["result"].get("value")

    def poll(self, expression: str, done=bool, tries: int = 100):
        """Evaluate `expression` until `done(value)` holds (every 0.2 s, at most `tries` times); its last value."""
        value = None
        for _ in range(tries):
            value = self.evaluate(expression)
            if done(value):
                break
            time.sleep(0.2)
        return value

    def drain(self, seconds: float) -> None:
        end = time.time() + seconds
        while time.time() < end:
            msg = self._recv(0.1)
            if msg is not None:
                self.events.append(msg)

    def close(self) -> None:
        try:
            self.call("Browser.close", timeout=5)
        except (TimeoutError, RuntimeError, OSError):
            pass
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(port: int, seconds: float = 30) -> bool:
    """True once something listens on 127.0.0.1:`port` (within `seconds`)."""
    end = time.time() + seconds
    while time.time() < end:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return True
        time.sleep(0.1)
    return False


def page_problems(events: list[dict], port: int) -> dict[str, list]:
    """What went wrong in a page, from the DevTools events: failed loads, uncaught exceptions,
    console errors, and requests that left 127.0.0.1:`port`."""
    return {
        "failed": [e["params"] for e in events if e.get("method") == "Network.loadingFailed"],
        "errors": [e["params"]["exceptionDetails"] for e in events if e.get("method") == "Runtime.exceptionThrown"],
        "console": [e["params"]["entry"] for e in events if e.get("method") == "Log.entryAdded"
                    and e["params"]["entry"]["level"] == "error"
                    and not e["params"]["entry"].get("url", "").endswith("/favicon.ico")],
        "outside": [e["params"]["request"]["url"] for e in events if e.get("method") == "Network.requestWillBeSent"
                    and not e["params"]["request"]["url"].startswith((f"http://127.0.0.1:{port}/", "data:", "blob:"))],
    }


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
