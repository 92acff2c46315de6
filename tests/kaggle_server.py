"""A loopback server that speaks the Kaggle API protocol the real `kaggle` CLI uses.

The CLI is pointed at it with KAGGLE_API_ENVIRONMENT=LOCALHOST (it then calls
http://localhost/api/v1/<service>/<Method>) and HTTP_PROXY=http://127.0.0.1:<port>:
requests arrive in absolute form, so routing is on the URL's path. It checks
requests the way Kaggle does for what the kit relies on, and records them.
"""
from __future__ import annotations

import base64
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlparse

from kagglekit.publish.build import INSTALL_MARK


class FakeKaggle:
    def __init__(self, username="tester", key="0123456789abcdef0123"):
        self.username, self.key = username, key
        self.requests: list[tuple[str, dict]] = []
        self.push_error = ""  # set to make SaveKernel refuse
        self.status = "COMPLETE"
        self.failure = ""
        self.files: dict[str, bytes] = {}
        self.versions = 0
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep test output clean
                pass

            def _send(self, code: int, body: bytes, kind="application/json"):
                self.send_response(code)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self):
                name = urlparse(self.path).path.removeprefix("/files/")
                if name in server.files:
                    self._send(200, server.files[name], "application/octet-stream")
                else:
                    self._send(404, b"not found", "text/plain")

            def do_POST(self):
                path = urlparse(self.path).path
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])) or b"{}")
                server.requests.append((path, body))
                expected = "Basic " + base64.b64encode(f"{server.username}:{server.key}".encode()).decode()
                if self.headers.get("Authorization") != expected:
                    return self._send(401, json.dumps({"code": 401, "message": "Unauthenticated"}).encode())
                method = path.rsplit("/", 1)[-1]
                answer = getattr(server, f"on_{method}", None)
                if answer is None:
                    return self._send(404, json.dumps({"code": 404, "message": f"no {path}"}).encode())
                code, reply = answer(body)
                self._send(code, json.dumps(reply).encode())

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    # ---- what Kaggle checks ------------------------------------------------------
    def on_SaveKernel(self, body: dict):
        problems = []
        if body.get("machineShape") != "NvidiaTeslaT4":
            problems.append(f"machineShape {body.get('machineShape')!r} is not T4 x2")
        if body.get("enableInternet"):
            problems.append("internet is on")
        if len(body.get("text", "").encode()) > 1_000_000:
            return 400, {"code": 400, "message": "source too large"}
        if problems:
            return 200, {"error": "; ".join(problems)}
        if self.push_error:
            return 200, {"error": self.push_error}
        self.versions += 1
        return 200, {"ref": f"/code/{body['slug']}", "url": f"http://localhost/code/{body['slug']}",
                     "versionNumber": self.versions}

    def on_GetKernelSessionStatus(self, body: dict):
        reply = {"status": self.status}
        if self.failure:
            reply["failureMessage"] = self.failure
        return 200, reply

    def on_ListKernelSessionOutput(self, body: dict):
        files = [{"url": f"http://localhost/files/{name}", "fileName": name} for name in self.files]
        log = json.dumps([{"stream_name": "stdout", "time": 1.0, "data": "done\n"}])
        return 200, {"files": files, "log": log}

    # ---- helpers for tests -------------------------------------------------------------
    def pushed(self) -> list[dict]:
        return [b for p, b in self.requests if p.endswith("/SaveKernel")]

    def env(self, home) -> dict:
        """Environment for the CLI: hermetic HOME and config, loopback routing."""
        folder = home / ".kaggle"
        folder.mkdir(parents=True, exist_ok=True)
        creds = folder / "kaggle.json"
        creds.write_text(json.dumps({"username": self.username, "key": self.key}))
        creds.chmod(0o600)
        return {"HOME": str(home), "KAGGLE_CONFIG_DIR": str(folder),
                "KAGGLE_API_ENVIRONMENT": "LOCALHOST", "HTTP_PROXY": f"http://127.0.0.1:{self.port}",
                "http_proxy": f"http://127.0.0.1:{self.port}", "NO_PROXY": "", "no_proxy": ""}

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()
