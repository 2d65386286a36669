"""A small Hugging Face Hub for tests: the part of the Hub's HTTP API that ``huggingface_hub``'s client uses to push
and download model repositories, served on 127.0.0.1 and stored in a folder.

Point the real client at it with ``HF_ENDPOINT=http://127.0.0.1:PORT`` (and ``HF_HUB_DISABLE_XET=1``: this Hub
stores large files over the LFS protocol and offers no Xet storage). Run it by hand with::

    python tests/hub_server.py --port 8990 --data /tmp/test-hub

It prints one line once it answers (``GET /`` is 200). Any non-empty token (``HF_TOKEN`` or
``Authorization: Bearer …``) is accepted as the user ``--user`` (default ``me``, member of ``--org``, default
``org``); a token starting with ``hf_read`` has read access only. Writes without a token are refused (401).

Endpoints (``{repo}`` is ``NAMESPACE/NAME``; ``{rev}`` a branch or a commit id):

* ``GET /api/whoami-v2`` (``HfApi.whoami``);
* ``POST /api/validate-yaml`` (``upload_folder`` checks a ``README.md``'s metadata block first);
* ``GET /api/agent-harnesses`` (the client's user-agent registry, fetched once a day: empty here);
* ``POST /api/repos/create`` (``HfApi.create_repo``): a new repository has one commit with ``.gitattributes``;
* ``GET /api/models/{repo}`` and ``/api/models/{repo}/revision/{rev}`` (``HfApi.repo_info`` / ``model_info``,
  ``snapshot_download``): id, sha, private, siblings;
* ``POST /api/models/{repo}/preupload/{rev}`` (``create_commit`` / ``upload_folder``: which files go by LFS);
* ``POST /{repo}.git/info/lfs/objects/batch`` (the LFS batch API, ``basic`` transfer), then the client's
  ``PUT`` of each object to the signed ``href`` it was given and ``POST`` to its ``verify`` link;
* ``POST /api/models/{repo}/commit/{rev}`` (``create_commit``: NDJSON header, ``file``, ``lfsFile``,
  ``deletedFile``, ``deletedFolder`` lines);
* ``HEAD``/``GET /{repo}/resolve/{rev}/{path}`` (``hf_hub_download``, every model load): ``X-Repo-Commit`` and
  ``ETag``; an LFS file answers ``302`` to another host name of this server (as the Hub sends the client to its
  CDN) with ``X-Linked-Etag`` (the sha256) and ``X-Linked-Size``;
* ``GET /api/models/{repo}/refs`` (``list_repo_refs``), ``/api/models/{repo}/commits/{rev}``
  (``list_repo_commits``) and ``/api/models/{repo}/tree/{rev}[/{path}]`` (``list_repo_tree``: transformers looks
  for a tokenizer's chat templates this way).

Errors carry the Hub's ``X-Error-Code`` (``RepoNotFound``, ``RevisionNotFound``, ``EntryNotFound``), so the client
raises its own exceptions. A private repository is, to a request without its owner's token, a repository that does
not exist (401), as on the Hub.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import hashlib
import hmac
import json
import os
import re
import secrets
import socket
import tempfile
import threading
import time
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import urlsplit

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

#: Files the Hub keeps in LFS: these suffixes (its default .gitattributes), binary content, or anything over 10 MB.
LFS_SUFFIXES = (
    ".safetensors",
    ".bin",
    ".pt",
    ".pth",
    ".onnx",
    ".ckpt",
    ".h5",
    ".msgpack",
    ".npy",
    ".npz",
    ".pkl",
)
LFS_MIN_SIZE = 10 * 1024 * 1024
GITATTRIBUTES = "".join(
    f"*{suffix} filter=lfs diff=lfs merge=lfs -text\n" for suffix in LFS_SUFFIXES
)
REPO = r"(?P<repo>[\w.-]+/[\w.-]+)"


def git_blob_sha(content: bytes) -> str:
    """The git object id of a file (what the Hub calls a regular file's oid and ETag)."""
    return hashlib.sha1(b"blob %d\0" % len(content) + content).hexdigest()


def lfs_pointer(sha256: str, size: int) -> bytes:
    return (
        f"version https://git-lfs.github.com/spec/v1\noid sha256:{sha256}\nsize {size}\n".encode()
    )


class HubStore:
    """Repositories on disk: ``repos/NS/NAME.json`` (refs, commits and each commit's file table), ``blobs/`` (regular
    files by git oid) and ``lfs/`` (LFS objects by sha256). One lock: requests may run in threads."""

    def __init__(
        self, root: str | os.PathLike, user: str = "me", orgs: tuple[str, ...] = ("org",)
    ) -> None:
        self.root = Path(root)
        for part in ("repos", "blobs", "lfs", "tmp"):
            (self.root / part).mkdir(parents=True, exist_ok=True)
        self.user, self.orgs = user, tuple(orgs)
        self.lock = threading.RLock()
        secret_file = self.root / "secret"
        if not secret_file.exists():
            secret_file.write_text(secrets.token_hex(16))
        self.secret = secret_file.read_text().strip().encode()

    # -- repositories ----------------------------------------------------------------------------------
    def _file(self, repo_id: str) -> Path:
        return self.root / "repos" / f"{repo_id}.json"

    def load(self, repo_id: str) -> dict | None:
        path = self._file(repo_id)
        return json.loads(path.read_text()) if path.exists() else None

    def save(self, repo_id: str, repo: dict) -> None:
        path = self._file(repo_id)
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_suffix(".tmp")
        temporary.write_text(json.dumps(repo, indent=1))
        os.replace(temporary, path)

    def create(self, repo_id: str, private: bool) -> dict:
        repo = {"id": repo_id, "private": private, "refs": {}, "commits": {}, "created": _now()}
        self.commit(
            repo,
            "main",
            "initial commit",
            "",
            {".gitattributes": self.put_blob(GITATTRIBUTES.encode())},
        )
        self.save(repo_id, repo)
        return repo

    def commit(self, repo: dict, branch: str, title: str, message: str, files: dict) -> str:
        parent = repo["refs"].get(branch)
        record = {
            "parent": parent,
            "title": title,
            "message": message,
            "date": _now(),
            "author": self.user,
        }
        record["files"] = files
        sha = hashlib.sha1(
            json.dumps([repo["id"], record, time.time_ns()], sort_keys=True).encode()
        ).hexdigest()
        repo["commits"][sha] = record
        repo["refs"][branch] = sha
        return sha

    @staticmethod
    def resolve(repo: dict, revision: str) -> str | None:
        """A branch name or a commit id (full, or a prefix of 7 or more) → the commit id."""
        if revision in repo["refs"]:
            return repo["refs"][revision]
        if re.fullmatch(r"[0-9a-f]{7,40}", revision):
            found = [sha for sha in repo["commits"] if sha.startswith(revision)]
            return found[0] if len(found) == 1 else None
        return None

    def history(self, repo: dict, sha: str) -> list[tuple[str, dict]]:
        out = []
        while sha:
            out.append((sha, repo["commits"][sha]))
            sha = repo["commits"][sha]["parent"]
        return out

    # -- contents --------------------------------------------------------------------------------------
    def put_blob(self, content: bytes) -> dict:
        oid = git_blob_sha(content)
        path = self.root / "blobs" / oid
        if not path.exists():
            path.write_bytes(content)
        return {"oid": oid, "size": len(content)}

    def lfs_path(self, sha256: str) -> Path:
        return self.root / "lfs" / sha256

    def sign(self, sha256: str) -> str:
        return hmac.new(self.secret, sha256.encode(), "sha256").hexdigest()[:32]


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _error(status: int, message: str, code: str | None = None) -> JSONResponse:
    headers = {"X-Error-Message": message}
    if code:
        headers["X-Error-Code"] = code
    return JSONResponse({"error": message}, status_code=status, headers=headers)


# ------------------------------------------------------------------------------------------------------ the app
class HubApp:
    """The routes; ``self.store`` holds the data."""

    def __init__(self, store: HubStore) -> None:
        self.store = store
        repo_routes = [
            ("/api/models/{repo}", self.repo_info, ["GET"]),
            ("/api/models/{repo}/revision/{rev}", self.repo_info, ["GET"]),
            ("/api/models/{repo}/preupload/{rev}", self.preupload, ["POST"]),
            ("/api/models/{repo}/commit/{rev}", self.commit, ["POST"]),
            ("/api/models/{repo}/refs", self.refs, ["GET"]),
            ("/api/models/{repo}/commits/{rev}", self.commits, ["GET"]),
            ("/api/models/{repo}/tree/{rev}", self.tree, ["GET"]),
            ("/api/models/{repo}/tree/{rev}/{path:path}", self.tree, ["GET"]),
            ("/{repo}.git/info/lfs/objects/batch", self.lfs_batch, ["POST"]),
            ("/{repo}/resolve/{rev}/{path:path}", self.resolve, ["GET", "HEAD"]),
        ]
        routes = [
            Route("/", lambda request: PlainTextResponse("slice-st test Hub\n")),
            Route("/api/whoami-v2", self.whoami),
            Route("/api/repos/create", self.create_repo, methods=["POST"]),
            Route("/api/validate-yaml", self.validate_yaml, methods=["POST"]),
            Route(
                "/api/agent-harnesses",
                lambda request: JSONResponse({"standardEnvVars": [], "harnesses": {}}),
            ),
            Route("/lfs-objects/{sha256}", self.lfs_upload, methods=["PUT"]),
            Route("/lfs-objects/{sha256}", self.lfs_download, methods=["GET", "HEAD"]),
            Route("/lfs-verify/{sha256}", self.lfs_verify, methods=["POST"]),
        ]
        for path, handler, methods in repo_routes:
            routes.append(
                Route(path.replace("{repo}", "{namespace}/{name}"), handler, methods=methods)
            )
        self.app = Starlette(routes=routes)

    # -- who is asking ---------------------------------------------------------------------------------
    def role(self, request: Request) -> str | None:
        """``"write"``, ``"read"`` or ``None`` (no token)."""
        header = request.headers.get("authorization", "")
        token = header[7:].strip() if header.lower().startswith("bearer ") else ""
        if not token:
            return None
        return "read" if token.startswith("hf_read") else "write"

    def namespaces(self) -> set[str]:
        return {self.store.user, *self.store.orgs}

    def find(
        self, request: Request, *, write: bool = False
    ) -> tuple[str, dict | None, Response | None]:
        """The repository of the request, or the Hub's answer when it cannot be seen (or written)."""
        repo_id = f"{request.path_params['namespace']}/{request.path_params['name']}"
        role = self.role(request)
        repo = self.store.load(repo_id)
        if repo is None or (repo["private"] and role is None):
            status = 401 if role is None else 404
            return repo_id, None, _error(status, "Repository not found", "RepoNotFound")
        if write and role != "write":
            return (
                repo_id,
                None,
                _error(401 if role is None else 403, "You don't have write access to this repo"),
            )
        return repo_id, repo, None

    def find_revision(
        self, request: Request, default: str | None = None
    ) -> tuple[dict | None, str, Response | None]:
        """The repository and the commit id of the request's revision (``rev``, else ``default``), or the answer."""
        _, repo, refused = self.find(request)
        if refused:
            return None, "", refused
        sha = self.store.resolve(repo, request.path_params.get("rev", default))
        if sha is None:
            return None, "", _error(404, "Invalid rev id", "RevisionNotFound")
        return repo, sha, None

    # -- account and repositories ----------------------------------------------------------------------
    async def whoami(self, request: Request) -> Response:
        role = self.role(request)
        if role is None:
            return _error(401, "Invalid credentials in Authorization header")
        return JSONResponse(
            {
                "type": "user",
                "name": self.store.user,
                "fullname": self.store.user,
                "orgs": [{"type": "org", "name": org} for org in self.store.orgs],
                "auth": {
                    "type": "access_token",
                    "accessToken": {"displayName": "test", "role": role},
                },
            }
        )

    async def create_repo(self, request: Request) -> Response:
        role = self.role(request)
        if role is None:
            return _error(401, "Invalid credentials in Authorization header")
        body = await request.json()
        namespace, name = body.get("organization") or self.store.user, body.get("name", "")
        if body.get("type", "model") != "model":
            return _error(400, "This test Hub stores model repositories only")
        if not re.fullmatch(r"[\w.-]+", name or ""):
            return _error(400, f"Invalid repository name {name!r}")
        if role != "write" or namespace not in self.namespaces():
            return _error(
                403,
                f"You don't have the rights to create a model under the namespace {namespace!r}",
            )
        repo_id = f"{namespace}/{name}"
        url = f"{str(request.base_url).rstrip('/')}/{repo_id}"
        with self.store.lock:
            if self.store.load(repo_id) is not None:
                return JSONResponse(
                    {"error": "You already created this model repo", "url": url}, status_code=409
                )
            private = body.get("visibility") == "private" or bool(body.get("private"))
            self.store.create(repo_id, private)
        return JSONResponse({"url": url, "name": repo_id, "id": repo_id})

    async def validate_yaml(self, request: Request) -> Response:
        """The README's metadata block (``upload_folder`` checks it before uploading): a YAML mapping, or 400."""
        import yaml

        content = (await request.json()).get("content", "")
        match = re.match(r"---\n(.*?)\n---\n", content, flags=re.DOTALL)
        try:
            meta = yaml.safe_load(match.group(1)) if match else {}
        except yaml.YAMLError as error:
            return JSONResponse(
                {"errors": [{"message": f"Invalid YAML: {error}"}], "warnings": []}, status_code=400
            )
        if not isinstance(meta, dict):
            return JSONResponse(
                {"errors": [{"message": "The metadata is not a mapping"}], "warnings": []},
                status_code=400,
            )
        return JSONResponse({"errors": [], "warnings": []})

    async def repo_info(self, request: Request) -> Response:
        repo, sha, refused = self.find_revision(request, "main")
        if refused:
            return refused
        repo_id = repo["id"]
        files = repo["commits"][sha]["files"]
        return JSONResponse(
            {
                "_id": hashlib.sha1(repo_id.encode()).hexdigest()[:24],
                "id": repo_id,
                "modelId": repo_id,
                "author": repo_id.split("/")[0],
                "sha": sha,
                "private": repo["private"],
                "gated": False,
                "disabled": False,
                "lastModified": repo["commits"][sha]["date"],
                "createdAt": repo["created"],
                "tags": [],
                "siblings": [{"rfilename": path} for path in sorted(files)],
            }
        )

    async def refs(self, request: Request) -> Response:
        _, repo, refused = self.find(request)
        if refused:
            return refused
        branches = [
            {"name": name, "ref": f"refs/heads/{name}", "targetCommit": sha}
            for name, sha in sorted(repo["refs"].items())
        ]
        return JSONResponse({"branches": branches, "tags": [], "converts": [], "pullRequests": []})

    async def commits(self, request: Request) -> Response:
        repo, sha, refused = self.find_revision(request)
        if refused:
            return refused
        return JSONResponse(
            [
                {
                    "id": commit_id,
                    "title": record["title"],
                    "message": record["message"],
                    "authors": [{"user": record["author"]}],
                    "date": record["date"],
                }
                for commit_id, record in self.store.history(repo, sha)
            ]
        )

    async def tree(self, request: Request) -> Response:
        """The files and folders under a path of a revision (``recursive=true``: all below it)."""
        repo, sha, refused = self.find_revision(request)
        if refused:
            return refused
        base = request.path_params.get("path", "").strip("/")
        prefix = f"{base}/" if base else ""
        recursive = request.query_params.get("recursive", "false").lower() == "true"
        files = repo["commits"][sha]["files"]
        below = {path: entry for path, entry in files.items() if path.startswith(prefix)}
        if base and not below:
            return _error(404, f"{base} does not exist in this revision", "EntryNotFound")
        entries, folders = [], set()
        for path, entry in sorted(below.items()):
            parts = path[len(prefix) :].split("/")
            for depth in range(1, len(parts)):
                folder = prefix + "/".join(parts[:depth])
                if (recursive or depth == 1) and folder not in folders:
                    folders.add(folder)
                    entries.append(
                        {"type": "directory", "oid": git_blob_sha(folder.encode()), "path": folder}
                    )
            if recursive or len(parts) == 1:
                item = {"type": "file", "oid": entry["oid"], "size": entry["size"], "path": path}
                if entry.get("lfs"):
                    item["size"] = entry["lfs"]["size"]
                    item["lfs"] = {
                        **entry["lfs"],
                        "oid": entry["lfs"]["sha256"],
                        "pointerSize": entry["size"],
                    }
                entries.append(item)
        return JSONResponse(entries)

    # -- uploads ---------------------------------------------------------------------------------------
    async def preupload(self, request: Request) -> Response:
        _, repo, refused = self.find(request, write=True)
        if refused:
            return refused
        sha = self.store.resolve(repo, request.path_params["rev"])
        files = repo["commits"][sha]["files"] if sha else {}
        answer = []
        for item in (await request.json()).get("files", []):
            path, size = item["path"], int(item["size"])
            sample = base64.b64decode(item.get("sample", ""))
            lfs = path.endswith(LFS_SUFFIXES) or size >= LFS_MIN_SIZE or b"\0" in sample
            held = files.get(path)
            oid = (
                None
                if held is None
                else (held["lfs"]["sha256"] if held.get("lfs") else held["oid"])
            )
            answer.append(
                {
                    "path": path,
                    "uploadMode": "lfs" if lfs else "regular",
                    "shouldIgnore": False,
                    "oid": oid,
                }
            )
        return JSONResponse({"files": answer, "commitOid": sha})

    async def lfs_batch(self, request: Request) -> Response:
        _, repo, refused = self.find(request, write=True)
        if refused:
            return refused
        body = await request.json()
        if body.get("operation") != "upload" or "basic" not in body.get("transfers", ["basic"]):
            return _error(400, "This test Hub takes LFS uploads with the basic transfer only")
        base = str(request.base_url).rstrip("/")
        objects = []
        for item in body.get("objects", []):
            oid, size = str(item["oid"]), int(item["size"])
            entry = {"oid": oid, "size": size, "authenticated": True}
            held = self.store.lfs_path(oid)
            if not re.fullmatch(r"[0-9a-f]{64}", oid):
                entry["error"] = {"code": 422, "message": "oid must be a sha256"}
            elif not (held.exists() and held.stat().st_size == size):
                sig = self.store.sign(oid)
                entry["actions"] = {
                    "upload": {
                        "href": f"{base}/lfs-objects/{oid}?size={size}&sig={sig}",
                        "header": {},
                    },
                    "verify": {"href": f"{base}/lfs-verify/{oid}", "header": {}},
                }
            objects.append(entry)
        return JSONResponse(
            {"transfer": "basic", "objects": objects},
            headers={"Content-Type": "application/vnd.git-lfs+json"},
        )

    async def lfs_upload(self, request: Request) -> Response:
        """The upload link of the LFS batch answer (signed, like a storage URL: the client sends no token here)."""
        sha256 = request.path_params["sha256"]
        if not hmac.compare_digest(request.query_params.get("sig", ""), self.store.sign(sha256)):
            return _error(403, "Bad or missing upload signature")
        digest, size = hashlib.sha256(), 0
        handle, temporary = tempfile.mkstemp(dir=self.store.root / "tmp")
        try:
            with os.fdopen(handle, "wb") as out:
                async for chunk in request.stream():
                    digest.update(chunk)
                    size += len(chunk)
                    out.write(chunk)
            if digest.hexdigest() != sha256 or str(size) != request.query_params.get(
                "size", str(size)
            ):
                return _error(400, "The uploaded content does not match its oid and size")
            os.replace(temporary, self.store.lfs_path(sha256))
        finally:
            if os.path.exists(temporary):
                os.unlink(temporary)
        return Response(status_code=200)

    async def lfs_verify(self, request: Request) -> Response:
        if self.role(request) != "write":
            return _error(401, "Invalid credentials in Authorization header")
        body = await request.json()
        held = self.store.lfs_path(request.path_params["sha256"])
        if not held.exists() or held.stat().st_size != int(body.get("size", -1)):
            return _error(404, "LFS object not found")
        return JSONResponse({"success": True})

    async def commit(self, request: Request) -> Response:
        repo_id, _, refused = self.find(request, write=True)
        if refused:
            return refused
        if request.query_params.get("create_pr"):
            return _error(400, "This test Hub has no pull requests")
        lines = [json.loads(line) for line in (await request.body()).splitlines() if line.strip()]
        with self.store.lock:
            repo = self.store.load(repo_id)
            branch = request.path_params["rev"]
            if branch not in repo["refs"]:
                return _error(404, "Invalid rev id", "RevisionNotFound")
            result = self.apply(repo, branch, lines)
            if isinstance(result, Response):
                return result
            self.store.save(repo_id, repo)
        url = f"{str(request.base_url).rstrip('/')}/{repo_id}/commit/{result}"
        return JSONResponse(
            {"success": True, "commitOid": result, "commitUrl": url, "pullRequestUrl": None}
        )

    def apply(self, repo: dict, branch: str, lines: list[dict]) -> str | Response:
        """Make the commit of the NDJSON ``lines`` on ``branch``; returns its id (or the error answer)."""
        files = dict(repo["commits"][repo["refs"][branch]]["files"])
        header = {}
        for line in lines:
            key, value = line.get("key"), line.get("value") or {}
            if key == "header":
                header = value
                parent = value.get("parentCommit")
                if parent and parent != repo["refs"][branch]:
                    return _error(412, "A commit has happened since the parent commit; pull first")
            elif key == "file":
                files[value["path"]] = self.store.put_blob(base64.b64decode(value["content"]))
            elif key == "lfsFile":
                sha256, held = value["oid"], self.store.lfs_path(value["oid"])
                if not held.exists():
                    return _error(422, f"LFS object {sha256} of {value['path']} was not uploaded")
                size = held.stat().st_size
                pointer = self.store.put_blob(lfs_pointer(sha256, size))
                files[value["path"]] = {**pointer, "lfs": {"sha256": sha256, "size": size}}
            elif key == "deletedFile":
                if files.pop(value["path"], None) is None:
                    return _error(404, "A file with this name doesn't exist", "EntryNotFound")
            elif key == "deletedFolder":
                prefix = value["path"].rstrip("/") + "/"
                files = {
                    path: entry for path, entry in files.items() if not path.startswith(prefix)
                }
            else:
                return _error(400, f"Unknown commit operation {key!r}")
        return self.store.commit(
            repo, branch, header.get("summary") or "Upload", header.get("description", ""), files
        )

    # -- downloads -------------------------------------------------------------------------------------
    async def resolve(self, request: Request) -> Response:
        repo, sha, refused = self.find_revision(request)
        if refused:
            return refused
        entry = repo["commits"][sha]["files"].get(request.path_params["path"])
        if entry is None:
            return _error(404, "Entry not found", "EntryNotFound")
        headers = {"X-Repo-Commit": sha, "ETag": f'"{entry["oid"]}"', "Accept-Ranges": "bytes"}
        if entry.get("lfs"):  # the Hub sends large files' downloads to its CDN: another host
            sha256, size = entry["lfs"]["sha256"], entry["lfs"]["size"]
            location = f"{_other_host(str(request.base_url))}lfs-objects/{sha256}?sig={self.store.sign(sha256)}"
            headers.update(
                {"X-Linked-Etag": f'"{sha256}"', "X-Linked-Size": str(size), "Location": location}
            )
            return Response(status_code=302, headers=headers)
        return _file_response(request, self.store.root / "blobs" / entry["oid"], headers)

    async def lfs_download(self, request: Request) -> Response:
        sha256 = request.path_params["sha256"]
        if not hmac.compare_digest(request.query_params.get("sig", ""), self.store.sign(sha256)):
            return _error(403, "Bad or missing signature")
        path = self.store.lfs_path(sha256)
        if not path.exists():
            return _error(404, "Not found")
        return _file_response(request, path, {"ETag": f'"{sha256}"', "Accept-Ranges": "bytes"})


def _other_host(base_url: str) -> str:
    """The same server under its other name (127.0.0.1 ↔ localhost): a different host, as the Hub's CDN is."""
    parts = urlsplit(base_url)
    host = "localhost" if parts.hostname == "127.0.0.1" else "127.0.0.1"
    return f"{parts.scheme}://{host}:{parts.port}/"


def _file_response(request: Request, path: Path, headers: dict) -> Response:
    """The file (or its tail, for a ``Range: bytes=N-`` resume); ``HEAD``: headers only."""
    size = path.stat().st_size
    match = re.fullmatch(r"bytes=(\d+)-", request.headers.get("range", ""))
    if request.method == "HEAD":
        return Response(status_code=200, headers={**headers, "Content-Length": str(size)})
    if match and 0 < int(match.group(1)) < size:
        start = int(match.group(1))
        with open(path, "rb") as handle:
            handle.seek(start)
            body = handle.read()
        headers = {**headers, "Content-Range": f"bytes {start}-{size - 1}/{size}"}
        return Response(
            body, status_code=206, headers=headers, media_type="application/octet-stream"
        )
    return FileResponse(path, headers=headers, media_type="application/octet-stream")


# ------------------------------------------------------------------------------------------------ running it
def make_app(
    data: str | os.PathLike, user: str = "me", orgs: tuple[str, ...] = ("org",)
) -> Starlette:
    """The test Hub's ASGI app, storing its repositories in ``data``."""
    return HubApp(HubStore(data, user, orgs)).app


@contextmanager
def running_hub(
    data: str | os.PathLike, port: int = 0, access_log: bool = False, wrap=None, **kwargs
):
    """Serve the test Hub in a background thread on 127.0.0.1 (``port=0``: a free port); yields its URL.
    ``access_log``: print a line per request; ``wrap``: an ASGI middleware around the app (a hostile Hub's)."""
    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    level = "info" if access_log else "warning"
    app = make_app(data, **kwargs)
    config = uvicorn.Config(
        wrap(app) if wrap else app, log_level=level, access_log=access_log, lifespan="off"
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    while not server.started:
        if not thread.is_alive():
            raise RuntimeError("the test Hub did not start")
        time.sleep(0.02)
    try:
        yield url
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description="A small Hugging Face Hub for tests (127.0.0.1 only)."
    )
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--data", required=True, help="folder that stores the repositories")
    parser.add_argument("--user", default="me")
    parser.add_argument(
        "--org", action="append", help="an organisation of the user (repeatable; default: org)"
    )
    parser.add_argument("--access-log", action="store_true", help="print a line per request")
    args = parser.parse_args(argv)
    orgs = tuple(args.org or ["org"])
    with running_hub(
        args.data, args.port, access_log=args.access_log, user=args.user, orgs=orgs
    ) as url:
        print(
            f"test Hub at {url} (data in {args.data}); HF_ENDPOINT={url} HF_HUB_DISABLE_XET=1",
            flush=True,
        )
        with contextlib.suppress(KeyboardInterrupt):
            threading.Event().wait()


if __name__ == "__main__":
    main()
