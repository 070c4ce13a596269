"""A Hub-protocol server for tests: the part of the Hugging Face Hub HTTP API that huggingface_hub uses.

It answers the real ``huggingface_hub`` client (``HfApi(endpoint=server.url)``) on 127.0.0.1 for:

- ``POST /api/repos/create``                         create_repo (409 when it exists);
- ``GET /api/models/{repo}[/revision/{rev}]``        repo_info (``sha`` and ``siblings``);
- ``POST /api/models/{repo}/preupload/{rev}``        every file is answered ``"regular"``: uploaded inline
  in the commit, so no LFS or Xet transfer is ever needed;
- ``POST /api/models/{repo}/commit/{rev}``           the ndjson commit (files base64-encoded, deletions);
- ``POST /api/validate-yaml``                        a README.md's metadata (always valid);
- ``GET /api/models/{repo}/tree/{rev}``              list_repo_tree (used by snapshot_download);
- ``HEAD|GET /{repo}/resolve/{rev}/{path}``          file download.

Repositories live on disk: each commit is a full snapshot folder, each branch a pointer to a commit.
Tokens name users (``Authorization: Bearer <token>``); a missing or unknown token gets 401.
Hooks for failure tests: ``fail_commits`` (commit numbers answered 403), ``gate`` (an Event every commit
waits on: a slow Hub without sleeps).
"""

from __future__ import annotations

import base64
import hashlib
import json
import shutil
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

__all__ = ["Commit", "HubServer", "TOKEN", "USER"]

TOKEN = "hf_test_token"
USER = "tester"


@dataclass
class Commit:
    """One commit as the server received it."""

    repo_id: str
    revision: str
    message: str
    oid: str
    files: list[str]
    deleted: list[str] = field(default_factory=list)


class HubServer:
    """The test Hub: ``start()``, ``url``, ``commits``, ``files(repo_id)``, ``stop()``."""

    def __init__(self, root: Path, tokens: dict[str, str] | None = None) -> None:
        self.root = Path(root)
        self.tokens = tokens if tokens is not None else {TOKEN: USER}
        self.commits: list[Commit] = []
        self.commit_attempts = 0
        self.fail_commits: set[int] = set()
        self.gate: threading.Event | None = None
        self.commit_started = threading.Event()
        self.lock = threading.Lock()
        self._httpd: ThreadingHTTPServer | None = None

    # --- lifecycle ---------------------------------------------------------------------------
    def start(self) -> HubServer:
        server = self

        class Handler(_Handler):
            hub = server

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        threading.Thread(target=self._httpd.serve_forever, daemon=True).start()
        return self

    @property
    def url(self) -> str:
        assert self._httpd is not None
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    def stop(self) -> None:
        if self.gate is not None:
            self.gate.set()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    # --- storage -----------------------------------------------------------------------------
    def repo_dir(self, repo_id: str) -> Path:
        return self.root / "repos" / repo_id

    def exists(self, repo_id: str) -> bool:
        return (self.repo_dir(repo_id) / "refs.json").is_file()

    def refs(self, repo_id: str) -> dict[str, str]:
        return json.loads((self.repo_dir(repo_id) / "refs.json").read_text())

    def resolve(self, repo_id: str, revision: str) -> str | None:
        """The commit oid of ``revision`` (a branch or an oid), or None."""
        refs = self.refs(repo_id)
        if revision in refs:
            return refs[revision]
        return revision if (self.repo_dir(repo_id) / "commits" / revision).is_dir() else None

    def snapshot(self, repo_id: str, oid: str) -> Path:
        return self.repo_dir(repo_id) / "commits" / oid

    def files(self, repo_id: str, revision: str = "main") -> set[str]:
        """The paths in the repository at ``revision``."""
        oid = self.resolve(repo_id, revision)
        if oid is None:
            return set()
        base = self.snapshot(repo_id, oid)
        return {p.relative_to(base).as_posix() for p in base.rglob("*") if p.is_file()}

    def read(self, repo_id: str, path: str, revision: str = "main") -> bytes:
        oid = self.resolve(repo_id, revision)
        assert oid is not None
        return (self.snapshot(repo_id, oid) / path).read_bytes()

    def create(self, repo_id: str, private: bool) -> None:
        base = self.repo_dir(repo_id)
        oid = hashlib.sha1(repo_id.encode()).hexdigest()
        (base / "commits" / oid).mkdir(parents=True)
        (base / "refs.json").write_text(json.dumps({"main": oid}))
        (base / "private").write_text(json.dumps(private))

    def commit(self, repo_id: str, revision: str, lines: list[dict[str, Any]]) -> Commit:
        """Apply one ndjson commit on ``revision`` (a branch, created from main when new)."""
        with self.lock:
            refs = self.refs(repo_id)
            parent = refs.get(revision, refs["main"])
            header = next(line["value"] for line in lines if line["key"] == "header")
            digest = hashlib.sha1(f"{parent}{len(self.commits)}{header['summary']}".encode()).hexdigest()
            target = self.snapshot(repo_id, digest)
            shutil.copytree(self.snapshot(repo_id, parent), target)
            written, deleted = [], []
            for line in lines:
                value = line["value"]
                if line["key"] == "file":
                    path = target / value["path"]
                    path.parent.mkdir(parents=True, exist_ok=True)
                    path.write_bytes(base64.b64decode(value["content"]))
                    written.append(value["path"])
                elif line["key"] in ("deletedFile", "deletedFolder"):
                    gone = target / value["path"]
                    shutil.rmtree(gone) if gone.is_dir() else gone.unlink(missing_ok=True)
                    deleted.append(value["path"])
            refs[revision] = digest
            (self.repo_dir(repo_id) / "refs.json").write_text(json.dumps(refs))
            record = Commit(repo_id, revision, header["summary"], digest, sorted(written), deleted)
            self.commits.append(record)
            return record


class _Handler(BaseHTTPRequestHandler):
    hub: HubServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        pass

    # --- replies -----------------------------------------------------------------------------
    def _send(self, status: int, body: Any = None, headers: dict[str, str] | None = None) -> None:
        data = body if isinstance(body, bytes) else json.dumps(body if body is not None else {}).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def _error(self, status: int, message: str, code: str | None = None) -> None:
        self._send(status, {"error": message}, {"X-Error-Code": code} if code else None)

    def _user(self) -> str | None:
        auth = self.headers.get("Authorization", "")
        return self.hub.tokens.get(auth.removeprefix("Bearer ").strip()) if auth else None

    def _body(self) -> bytes:
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    # --- routing -----------------------------------------------------------------------------
    def do_POST(self) -> None:  # noqa: N802 - BaseHTTPRequestHandler's name
        path = unquote(urlparse(self.path).path)
        body = self._body()
        if self._user() is None:
            return self._error(401, "Invalid credentials in Authorization header")
        if path == "/api/repos/create":
            return self._create(json.loads(body))
        if path == "/api/validate-yaml":  # the model card's metadata: accepted as it is
            return self._send(200, {"errors": [], "warnings": []})
        parts = path.split("/")  # "", "api", "models", ns, name, action, revision...
        if len(parts) < 7 or parts[:3] != ["", "api", "models"]:
            return self._error(404, f"no route {path}")
        repo_id, action, revision = f"{parts[3]}/{parts[4]}", parts[5], "/".join(parts[6:])
        if not self.hub.exists(repo_id):
            return self._error(404, "Repository not found", "RepoNotFound")
        if action == "preupload":
            files = json.loads(body)["files"]
            modes = [{"path": f["path"], "uploadMode": "regular", "shouldIgnore": False} for f in files]
            return self._send(200, {"files": modes})
        if action == "commit":
            return self._commit(repo_id, revision, body)
        return self._error(404, f"no route {path}")

    def _create(self, payload: dict[str, Any]) -> None:
        namespace = payload.get("organization") or self._user()
        repo_id = f"{namespace}/{payload['name']}"
        if self.hub.exists(
            repo_id
        ):  # the Hub's 409 names the repository's url too (create_repo(exist_ok=True) reads it)
            return self._send(
                409, {"error": "You already created this model repo", "url": f"{self.hub.url}/{repo_id}"}
            )
        self.hub.create(repo_id, payload.get("visibility") == "private")
        self._send(200, {"url": f"{self.hub.url}/{repo_id}", "name": repo_id})

    def _commit(self, repo_id: str, revision: str, body: bytes) -> None:
        with self.hub.lock:
            self.hub.commit_attempts += 1
            attempt = self.hub.commit_attempts
        self.hub.commit_started.set()
        if self.hub.gate is not None:
            self.hub.gate.wait()
        if attempt in self.hub.fail_commits:
            return self._error(403, f"commit {attempt} refused by the test server")
        lines = [json.loads(line) for line in body.splitlines() if line.strip()]
        record = self.hub.commit(repo_id, revision, lines)
        url = f"{self.hub.url}/{repo_id}/commit/{record.oid}"
        self._send(200, {"commitUrl": url, "commitOid": record.oid, "pullRequestUrl": None})

    def do_HEAD(self) -> None:  # noqa: N802
        self.do_GET()

    def do_GET(self) -> None:  # noqa: N802
        path = unquote(urlparse(self.path).path)
        parts = path.split("/")
        if parts[:3] == ["", "api", "models"] and len(parts) >= 5:
            repo_id = f"{parts[3]}/{parts[4]}"
            if not self.hub.exists(repo_id):
                return self._error(404, "Repository not found", "RepoNotFound")
            rest = parts[5:]
            if rest[:1] == ["tree"]:
                return self._tree(repo_id, rest[1] if len(rest) > 1 else "main")
            revision = "/".join(rest[1:]) if rest[:1] == ["revision"] else "main"
            return self._info(repo_id, revision)
        if len(parts) >= 6 and parts[3] == "resolve":
            return self._download(f"{parts[1]}/{parts[2]}", parts[4], "/".join(parts[5:]))
        return self._error(404, f"no route {path}")

    def _info(self, repo_id: str, revision: str) -> None:
        oid = self.hub.resolve(repo_id, revision)
        if oid is None:
            return self._error(404, "Revision not found", "RevisionNotFound")
        siblings = [{"rfilename": name} for name in sorted(self.hub.files(repo_id, oid))]
        private = json.loads((self.hub.repo_dir(repo_id) / "private").read_text())
        info = {"id": repo_id, "modelId": repo_id, "sha": oid, "private": private, "siblings": siblings}
        self._send(200, info)

    def _tree(self, repo_id: str, revision: str) -> None:
        oid = self.hub.resolve(repo_id, revision)
        if oid is None:
            return self._error(404, "Revision not found", "RevisionNotFound")
        base = self.hub.snapshot(repo_id, oid)
        entries = []
        for name in sorted(self.hub.files(repo_id, oid)):
            data = (base / name).read_bytes()
            entries.append({"type": "file", "path": name, "size": len(data), "oid": _blob_id(data)})
        self._send(200, entries)

    def _download(self, repo_id: str, revision: str, name: str) -> None:
        oid = self.hub.resolve(repo_id, revision) if self.hub.exists(repo_id) else None
        if oid is None:
            return self._error(404, "Repository not found", "RepoNotFound")
        target = self.hub.snapshot(repo_id, oid) / name
        if not target.is_file():
            return self._error(404, "Entry not found", "EntryNotFound")
        data = target.read_bytes()
        headers = {"X-Repo-Commit": oid, "ETag": f'"{_blob_id(data)}"'}
        self._send(200, data, headers)


def _blob_id(data: bytes) -> str:
    """The git blob id of ``data`` (what the Hub reports as a file's oid)."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
