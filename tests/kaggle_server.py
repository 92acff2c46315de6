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


class FakeKaggle:
    def __init__(self, username="tester", key="0123456789abcdef0123",
                 token="KGAT_0123456789abcdef0123456789abcdef"):
        self.username, self.key, self.token = username, key, token
        self.requests: list[tuple[str, dict]] = []
        self.push_error = ""  # set to make SaveKernel refuse
        self.refuse: set = set()  # owner/slug of kernels whose push is refused
        self.status = "COMPLETE"
        self.failure = ""
        self.files: dict[str, bytes] = {}
        self.log = [{"stream_name": "stdout", "time": 1.0, "data": "done\n"}]
        self.kernels: dict[str, dict] = {}  # slug -> the last SaveKernel body, as Kaggle keeps it
        self.versions = 0
        self.quota = {"used_s": 11 * 3600 + 1800, "allowed_s": 30 * 3600}
        self.datasets: dict[str, dict] = {}  # owner/slug -> {"versions": [{file name: bytes}], ...}
        self.downloads: dict[str, bytes] = {}  # a competition's or dataset's zip, by reference
        self.rules_accepted: set = set()  # competitions whose rules the account accepted
        self.served: dict[str, bytes] = {}  # what a download redirect points at
        self.submissions: list[dict] = []  # newest first, as the API lists them
        self.uploaded: list[tuple] = []  # (competition, file name, bytes) of file submissions
        self.blobs: dict[str, dict] = {}  # upload token -> {"name", "data"}
        self.processing_polls = 1  # status answers "blobs_received" this often before "ready"
        # Kernel sessions, when set: a pushed kernel RUNs for this many status polls, then is
        # COMPLETE; max_running is the most that ran at once (Kaggle runs ~2 GPU sessions).
        self.session_polls: int | None = None
        self.sessions: dict[str, int] = {}  # owner/slug -> status polls left while RUNNING
        self.max_running = 0
        # Kaggle Models (what kagglehub's model_upload and model_download call): owner/model ->
        # {"title", "private", "instances": {"<framework enum>/<variation>": [{path: bytes} per version]}}
        self.models: dict[str, dict] = {}
        self.outputs: dict[tuple[str, int], dict[str, bytes]] = {}  # (owner/slug, version) -> its output
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

            def do_PUT(self):  # a blob upload, to the createUrl StartBlobUpload handed out
                token = urlparse(self.path).path.removeprefix("/upload/")
                size = int(self.headers.get("Content-Length") or 0)
                data = self.rfile.read(size) if size else b""
                if token not in server.blobs:
                    return self._send(404, b"no such upload", "text/plain")
                server.blobs[token]["data"] += data
                self._send(200, b"{}")

            def do_GET(self):
                name = urlparse(self.path).path.removeprefix("/files/")
                found = server.files.get(name, server.served.get(name))
                if found is not None:
                    self._send(200, found, "application/octet-stream")
                else:
                    self._send(404, b"not found", "text/plain")

            def do_POST(self):
                path = urlparse(self.path).path
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])) or b"{}")
                server.requests.append((path, body))
                method = path.rsplit("/", 1)[-1]
                basic = "Basic " + base64.b64encode(f"{server.username}:{server.key}".encode()).decode()
                allowed = (basic, f"Bearer {server.token}")
                if self.headers.get("Authorization") not in allowed and method != "IntrospectToken":
                    return self._send(401, json.dumps({"code": 401, "message": "Unauthenticated"}).encode())
                answer = getattr(server, f"on_{method}", None)
                if answer is None:
                    return self._send(404, json.dumps({"code": 404, "message": f"no {path}"}).encode())
                code, reply = answer(body)
                if code in (301, 302):  # a download: Kaggle redirects to the file's storage URL
                    self.send_response(code)
                    self.send_header("Location", reply["location"])
                    self.send_header("Content-Length", "0")
                    return self.end_headers()
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
        if self.push_error or body["slug"] in self.refuse:
            return 200, {"error": self.push_error or "refused for this kernel"}
        # As Kaggle: a kernel cannot mount its own output before it exists.
        invalid = [k for k in body.get("kernelDataSources", [])
                   if k == body["slug"] and body["slug"] not in self.kernels]
        self.kernels[body["slug"]] = body
        self.versions += 1
        if self.session_polls is not None:
            self.sessions[body["slug"]] = self.session_polls
            self.max_running = max(self.max_running, sum(left > 0 for left in self.sessions.values()))
        reply = {"ref": f"/code/{body['slug']}", "url": f"http://localhost/code/{body['slug']}",
                 "versionNumber": self.versions}
        if invalid:
            reply["invalidKernelSources"] = invalid
        return 200, reply

    def on_GetKernel(self, body: dict):
        slug = f"{body['userName']}/{body['kernelSlug']}"
        if slug not in self.kernels:
            return 404, {"code": 404, "message": f"kernel {slug} not found"}
        k = self.kernels[slug]
        meta = {"ref": slug, "id": 4242, "title": k["newTitle"], "language": k["language"],
                "kernelType": k["kernelType"], "isPrivate": k.get("isPrivate", False),
                "enableGpu": k.get("enableGpu", False), "enableInternet": k.get("enableInternet", False),
                "datasetDataSources": k.get("datasetDataSources", []),
                "kernelDataSources": k.get("kernelDataSources", []),
                "competitionDataSources": k.get("competitionDataSources", []),
                "modelDataSources": k.get("modelDataSources", []),
                "categoryIds": k.get("categoryIds", []), "machineShape": k.get("machineShape", ""),
                "currentVersionNumber": self.versions}
        blob = {"source": k["text"], "language": k["language"], "kernelType": k["kernelType"],
                "slug": body["kernelSlug"]}
        return 200, {"metadata": meta, "blob": blob}

    def on_GetAcceleratorQuotaStatistics(self, body: dict):
        q = self.quota
        return 200, {"gpuQuota": {"timeUsed": f"{q['used_s']}s", "totalTimeAllowed": f"{q['allowed_s']}s"},
                     "quotaRefreshTime": "2026-11-28T00:00:00Z"}

    def on_IntrospectToken(self, body: dict):
        if body.get("token") != self.token:
            return 200, {"active": False}
        return 200, {"active": True, "username": self.username}

    def edit_on_server(self, slug: str, change) -> None:
        """A user's edit in Kaggle's editor: ``change(notebook_dict)`` on the stored source."""
        nb = json.loads(self.kernels[slug]["text"])
        change(nb)
        self.kernels[slug]["text"] = json.dumps(nb)

    # ---- datasets: status, blob uploads, create, version ---------------------------------
    def on_GetDatasetStatus(self, body: dict):
        ref = f"{body['ownerSlug']}/{body['datasetSlug']}"
        dataset = self.datasets.get(ref)
        if dataset is None:
            return 404, {"code": 404, "message": f"dataset {ref} not found"}
        dataset["polls"] += 1
        ready = dataset["polls"] > self.processing_polls
        return 200, {"status": "READY" if ready else "BLOBS_RECEIVED"}

    def on_StartBlobUpload(self, body: dict):
        token = f"blob{len(self.blobs)}"
        self.blobs[token] = {"name": body["name"], "data": b"", "length": int(body["contentLength"])}
        return 200, {"token": token, "createUrl": f"http://localhost/upload/{token}"}

    def _files(self, files: list) -> dict:
        blobs = [self.blobs[f["token"]] for f in files]
        assert all(len(b["data"]) == b["length"] for b in blobs), "a blob arrived incomplete"
        return {b["name"]: b["data"] for b in blobs}

    def on_CreateDataset(self, body: dict):
        ref = f"{body['ownerSlug']}/{body['slug']}"
        if ref in self.datasets:
            return 200, {"status": "error", "error": f"{ref} exists"}
        self.datasets[ref] = {"versions": [self._files(body.get("files", []))], "polls": 0,
                              "private": body.get("isPrivate", False), "title": body["title"]}
        return 200, {"status": "ok", "ref": ref, "url": f"http://localhost/datasets/{ref}"}

    def on_CreateDatasetVersion(self, body: dict):
        ref = f"{body['ownerSlug']}/{body['datasetSlug']}"
        if ref not in self.datasets:
            return 404, {"code": 404, "message": f"dataset {ref} not found"}
        self.datasets[ref]["versions"].append(self._files(body["body"].get("files", [])))
        self.datasets[ref]["polls"] = 0
        return 200, {"status": "ok", "ref": ref, "url": f"http://localhost/datasets/{ref}"}

    def on_GetKernelSessionStatus(self, body: dict):
        slug = f"{body.get('userName')}/{body.get('kernelSlug')}"
        if self.session_polls is not None and slug in self.sessions:
            left = self.sessions[slug]
            self.sessions[slug] = max(0, left - 1)
            return 200, {"status": "RUNNING" if left > 0 else "COMPLETE"}
        reply = {"status": self.status}
        if self.failure:
            reply["failureMessage"] = self.failure
        return 200, reply

    def on_ListKernelSessionOutput(self, body: dict):
        files = [{"url": f"http://localhost/files/{name}", "fileName": name} for name in self.files]
        return 200, {"files": files, "log": json.dumps(self.log)}

    def on_CreateCodeSubmission(self, body: dict):
        """As Kaggle: the kernel must exist and have the competition attached."""
        kernel = self.kernels.get(f"{body.get('kernelOwner')}/{body.get('kernelSlug')}")
        if kernel is None:
            return 404, {"code": 404, "message": "kernel not found"}
        if body.get("competitionName") not in kernel.get("competitionDataSources", []):
            return 400, {"code": 400, "message": "the kernel does not use this competition's data"}
        return 200, self._record(body, body.get("fileName", ""))

    # ---- file competitions: an upload, then the submission; the list with scores ----------
    def _record(self, body: dict, file_name: str) -> dict:
        ref = 31337 + len(self.submissions)
        self.submissions.insert(0, {"ref": ref, "fileName": file_name, "date": "2026-11-23T12:00:00Z",
                                    "description": body.get("submissionDescription", ""),
                                    "status": "PENDING", "competition": body["competitionName"]})
        return {"message": "Successfully submitted", "ref": ref}

    def on_StartSubmissionUpload(self, body: dict):
        token = f"sub{len(self.blobs)}"
        self.blobs[token] = {"name": body["fileName"], "data": b"", "length": int(body["contentLength"])}
        return 200, {"token": token, "createUrl": f"http://localhost/upload/{token}"}

    def on_CreateSubmission(self, body: dict):
        blob = self.blobs.get(body.get("blobFileTokens", ""))
        if blob is None or len(blob["data"]) != blob["length"]:
            return 400, {"code": 400, "message": "the submission file did not arrive"}
        self.uploaded.append((body["competitionName"], blob["name"], blob["data"]))
        return 200, self._record(body, blob["name"])

    def on_GetSubmissionLimits(self, body: dict):
        return 200, {"numToday": len(self.submissions), "numAllowedNow": 5 - len(self.submissions)}

    def on_ListSubmissions(self, body: dict):
        mine = [{k: v for k, v in s.items() if k != "competition"} for s in self.submissions
                if s["competition"] == body["competitionName"]]
        return 200, {"submissions": mine}

    def score(self, ref: int, public: str) -> None:
        """Kaggle has scored submission ``ref``."""
        for s in self.submissions:
            if s["ref"] == ref:
                s.update(status="COMPLETE", publicScore=public)

    # ---- Kaggle Models: a model, its variations (instances), their versions ------------------
    def on_GetModel(self, body: dict):
        ref = f"{body['ownerSlug']}/{body['modelSlug']}"
        if ref not in self.models:
            return 404, {"code": 404, "message": f"model {ref} not found"}
        return 200, {"id": 1, "ref": ref, "title": self.models[ref]["title"]}

    def on_CreateModel(self, body: dict):
        ref = f"{body['ownerSlug']}/{body['slug']}"
        if ref in self.models:
            return 200, {"error": f"model {ref} exists", "errorCode": 409}
        self.models[ref] = {"title": body["title"], "private": body.get("isPrivate", False), "instances": {}}
        return 200, {"id": len(self.models), "ref": ref, "url": f"http://localhost/models/{ref}"}

    def _tree(self, info: dict, prefix: str = "") -> dict:
        """An ApiUploadDirectoryInfo's files, by their path in the uploaded folder (as Models keep it)."""
        files = {prefix + name: data for name, data in self._files(info.get("files", [])).items()}
        for sub in info.get("directories", []):
            files.update(self._tree(sub, f"{prefix}{sub['name']}/"))
        return files

    def _instance(self, body: dict, framework: str, variation: str):
        ref = f"{body['ownerSlug']}/{body['modelSlug']}"
        return ref, self.models.get(ref), f"{framework}/{variation}"

    def on_CreateModelInstance(self, body: dict):
        inner = body["body"]
        ref, model, key = self._instance(body, inner["framework"], inner["instanceSlug"])
        if model is None:
            return 404, {"code": 404, "message": f"model {ref} not found"}
        if key in model["instances"]:  # kagglehub then creates a version instead
            return 200, {"error": f"{ref}/{key} exists", "errorCode": 409}
        model["instances"][key] = [self._tree(inner)]
        model["license"] = inner.get("licenseName")
        return 200, {"id": 1, "ref": f"{ref}/{key}", "url": f"http://localhost/models/{ref}/{key}"}

    def on_CreateModelInstanceVersion(self, body: dict):
        ref, model, key = self._instance(body, body["framework"], body["instanceSlug"])
        if model is None or key not in model["instances"]:
            return 404, {"code": 404, "message": f"{ref}/{key} not found"}
        model["instances"][key].append(self._tree(body["body"]))
        return 200, {"id": 1, "ref": f"{ref}/{key}", "url": f"http://localhost/models/{ref}/{key}"}

    def _versions(self, body: dict):
        ref, model, key = self._instance(body, body["framework"], body["instanceSlug"])
        return None if model is None else model["instances"].get(key)

    def on_GetModelInstance(self, body: dict):
        versions = self._versions(body)
        if versions is None:
            return 404, {"code": 404, "message": "model instance not found"}
        return 200, {"slug": body["instanceSlug"], "framework": body["framework"], "versionNumber": len(versions)}

    def _version_files(self, body: dict):
        versions = self._versions(body) or []
        number = int(body.get("versionNumber") or 0)
        return versions[number - 1] if 0 < number <= len(versions) else None

    def on_ListModelInstanceVersionFiles(self, body: dict):
        files = self._version_files(body)
        if files is None:
            return 404, {"code": 404, "message": "model version not found"}
        return 200, {"files": [{"name": name, "size": len(data)} for name, data in files.items()],
                     "nextPageToken": ""}

    def on_DownloadModelInstanceVersion(self, body: dict):
        files = self._version_files(body)
        if files is None or (body.get("path") and body["path"] not in files):
            return 404, {"code": 404, "message": "model version or file not found"}
        name = f"model-{len(self.served)}"
        self.served[name] = files[body["path"]] if body.get("path") else _zipped(files)
        return 302, {"location": f"http://localhost/files/{name}"}

    def on_DownloadKernelOutput(self, body: dict):
        """One version's output (the CLI reaches only the latest: ListKernelSessionOutput)."""
        key = (f"{body['ownerSlug']}/{body['kernelSlug']}", int(body.get("versionNumber") or 0))
        if key not in self.outputs:
            return 404, {"code": 404, "message": f"no output of {key[0]} version {key[1]}"}
        name = f"output-{len(self.served)}.zip"
        self.served[name] = _zipped(self.outputs[key])
        return 302, {"location": f"http://localhost/files/{name}"}

    # ---- downloads: a redirect to the zip, as Kaggle answers -----------------------------
    def _redirect(self, reference: str, name: str):
        if reference not in self.downloads:
            return 404, {"code": 404, "message": f"{reference} not found"}
        self.served[name] = self.downloads[reference]
        return 302, {"location": f"http://localhost/files/{name}"}

    def on_DownloadDataFiles(self, body: dict):
        competition = body["competitionName"]
        if competition not in self.rules_accepted:  # Kaggle: rules not accepted -> 403
            return 403, {"code": 403, "message": "Forbidden: you must accept this competition's rules"}
        return self._redirect(competition, f"{competition}.zip")

    def on_GetDatasetMetadata(self, body: dict):
        ref = f"{body['ownerSlug']}/{body['datasetSlug']}"
        if ref not in self.downloads and ref not in self.datasets:
            return 200, {"errorMessage": f"dataset {ref} not found"}
        return 200, {"info": {"datasetSlug": body["datasetSlug"], "ownerUser": body["ownerSlug"],
                              "licenses": [{"name": "CC0-1.0"}]}}

    def on_DownloadDataset(self, body: dict):
        return self._redirect(f"{body['ownerSlug']}/{body['datasetSlug']}", f"{body['datasetSlug']}.zip")

    # ---- helpers for tests -------------------------------------------------------------
    def pushed(self) -> list[dict]:
        return [b for p, b in self.requests if p.endswith("/SaveKernel")]

    def env(self, home, token: bool = False) -> dict:
        """Environment for the CLI: hermetic HOME and config, loopback routing; the
        credentials a kaggle.json, or (``token``) an access token file only."""
        folder = home / ".kaggle"
        folder.mkdir(parents=True, exist_ok=True)
        creds = folder / ("access_token" if token else "kaggle.json")
        creds.write_text(self.token if token else json.dumps({"username": self.username, "key": self.key}))
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


def _zipped(files: dict) -> bytes:
    """``{path: bytes}`` as one zip archive (what Kaggle serves for a whole folder)."""
    import io
    import zipfile
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, data in files.items():
            archive.writestr(name, data)
    return buffer.getvalue()
