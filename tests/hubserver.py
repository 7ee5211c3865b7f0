"""A Hugging Face Hub-compatible HTTP server for tests (standard library only).

It serves *model* repositories built from local folders or in-memory bytes on
``http://127.0.0.1:<ephemeral port>`` and speaks the subset of the Hub API that
``huggingface_hub`` 2.4 (httpx2-based) uses to read configs and safetensors
headers:

* ``GET /api/models/{repo_id}`` and ``GET /api/models/{repo_id}/revision/{rev}``
  (``HfApi.model_info``; ``?blobs=true`` adds ``size``/``blobId``/``lfs`` to the
  siblings, ``?expand=...`` filters the properties).
* ``GET /api/models/{repo_id}/tree/{rev}[/{path}]`` (``list_repo_tree``, with
  ``recursive``/``expand``/``cursor`` and a ``Link: <...>; rel="next"`` header
  for pagination) and ``POST /api/models/{repo_id}/paths-info/{rev}``
  (``get_paths_info``; form or JSON body).
* ``GET /api/models/{repo_id}/refs`` (``list_repo_refs``) and
  ``GET /api/models/{repo_id}/safetensors-metadata/{index}``
  (``get_sharded_safetensors_metadata``, ``main`` only, like the Hub).
* ``HEAD``/``GET /{repo_id}/resolve/{rev}/{path}`` (``hf_hub_download``,
  ``file_exists``, ``parse_safetensors_file_metadata``) with ``X-Repo-Commit``,
  ``ETag`` (git blob sha1, or the sha256 for LFS files), ``X-Linked-Etag`` /
  ``X-Linked-Size`` for LFS files, ``Content-Length``, ``Accept-Ranges`` and
  single ``Range`` requests (``bytes=a-b``, ``bytes=a-``, ``bytes=-n``) answered
  ``206`` with ``Content-Range`` (``416`` when unsatisfiable or multi-range).
* Optionally (``cdn_redirect=True``) LFS files are answered, like on the Hub,
  with a ``302`` to a "CDN" URL on ``http://localhost:<port>/_cdn/...``: another
  origin, so ``huggingface_hub`` stops following on HEAD and httpx2 drops the
  ``Authorization`` header when it follows the redirect on GET.

``parameter_counts=False`` leaves the ``safetensors`` parameter count out of ``model_info``, as
Hub-compatible servers other than the Hub answer. Every :class:`RequestRecord` carries when the
request arrived and when its answer was written (``time.monotonic()``).

Errors carry the ``X-Error-Code`` / ``X-Error-Message`` headers that
``huggingface_hub.utils.hf_raise_for_status`` maps to exception classes:
``RepoNotFound`` (404, or 401 for a private repo without a valid token) ->
``RepositoryNotFoundError``; ``GatedRepo`` (401 without token, 403 with a wrong
token) -> ``GatedRepoError``; ``RevisionNotFound`` -> ``RevisionNotFoundError``;
``EntryNotFound`` -> ``RemoteEntryNotFoundError`` (an ``EntryNotFoundError``).
Note that huggingface_hub only turns a *code-less* 401 into
``RepositoryNotFoundError`` for ``https://`` URLs, so the codes are required
here.

Faults (see :class:`Fault`) are injected per server, optionally restricted to a
path glob (``fnmatch`` on the percent-decoded URL path, ``*`` also matches
``/``) and a method, and apply to the first ``count`` matching requests
(``None`` = every request). Counters record every request.

Pointing ``huggingface_hub`` at the server: pass ``endpoint=server.endpoint``
to ``HfApi(...)`` / ``hf_hub_download(...)``, or use
:func:`point_huggingface_hub_at` (patches ``huggingface_hub.constants`` and the
module-level ``HfApi`` instance, because ``HF_ENDPOINT`` is only read at import
time), or set ``HF_ENDPOINT`` before ``huggingface_hub`` is imported (e.g. in a
subprocess).
"""

from __future__ import annotations

import fnmatch
import hashlib
import importlib
import json
import math
import os
import socket
import struct
import sys
import tempfile
import threading
import time
import urllib.parse
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from email.message import Message
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, NamedTuple, Self, TypeAlias, cast

__all__ = [
    "DEFAULT_LFS_PATTERNS",
    "Fault",
    "FaultKind",
    "FileSource",
    "HubServer",
    "LoggedRequest",
    "RepoSpec",
    "RequestRecord",
    "SparseFile",
    "derive_sha",
    "git_blob_sha1",
    "point_huggingface_hub_at",
    "repo_from_folder",
]

# Patterns (matched against the file name and the full path) of files stored with
# Git LFS; mirrors the Hub's default .gitattributes.
DEFAULT_LFS_PATTERNS: tuple[str, ...] = (
    "*.7z", "*.arrow", "*.bin", "*.bz2", "*.ckpt", "*.ftz", "*.gguf", "*.gz",
    "*.h5", "*.joblib", "*.mlmodel", "*.model", "*.msgpack", "*.npy", "*.npz",
    "*.onnx", "*.ot", "*.parquet", "*.pb", "*.pickle", "*.pkl", "*.pt", "*.pth",
    "*.rar", "*.safetensors", "*.tar", "*.tflite", "*.tgz", "*.wasm", "*.xz",
    "*.zip", "*.zst", "*tfevents*",
)  # fmt: skip

_LAST_MODIFIED = "2024-01-01T00:00:00.000Z"
_CHUNK = 1 << 16
_HEX = frozenset("0123456789abcdef")


@dataclass(frozen=True)
class SparseFile:
    """A virtual file: ``head`` followed by zero bytes up to ``size`` bytes.

    Lets a test serve e.g. a "70 GB" safetensors shard whose header is real
    without any disk space. Its ``sha256`` (LFS oid / ETag) is *not* the hash of
    the content unless given: by default it is a deterministic fake derived from
    ``head`` and ``size`` (hashing gigabytes of zeros would be slow).
    """

    head: bytes
    size: int
    sha256: str | None = None

    def __post_init__(self) -> None:
        if self.size < len(self.head):
            raise ValueError(f"SparseFile size {self.size} < len(head) {len(self.head)}")


# In-memory bytes, a filesystem path (pathlib.Path or any os.PathLike), or a
# SparseFile. Plain ``str`` is rejected on purpose (path or content?).
FileSource: TypeAlias = "bytes | os.PathLike[str] | SparseFile"

FaultKind = Literal[
    "latency",  # sleep `latency` seconds before answering (combines with others)
    "status",  # answer `status` (default 503) with a JSON error body
    "rate_limit",  # answer 429 with `Retry-After: retry_after`
    "reset",  # abort the connection with a TCP RST, no response
    "disconnect",  # close the connection (FIN) without any response
    "truncate",  # send `keep_bytes` (default: half) of the body, then close
    "wrong_range",  # answer a Range request 206 with a range shifted by `shift`
    "ignore_range",  # answer a Range request 200 with the whole file
    "oversize_range",  # answer a Range request 206 with the asked Content-Range, `extra` bytes more
    "gated",  # answer 401 X-Error-Code: GatedRepo whatever the token
    "drip",  # send the body `drip_bytes` at a time, one piece every `interval` seconds
]

_PRE_KINDS: frozenset[str] = frozenset({"status", "rate_limit", "reset", "disconnect", "gated"})


@dataclass
class Fault:
    """A fault applied to the first ``count`` requests matching ``path``/``method``.

    ``count=None`` applies it to every matching request. ``hits`` counts how many
    times it was applied. ``wrong_range``/``ignore_range``/``oversize_range`` only
    match GETs of a file with a ``Range`` header; ``truncate`` only matches responses with a
    non-empty body (not HEAD). Several ``latency`` faults add up; among the other
    kinds the first matching fault (in insertion order) wins.
    """

    kind: FaultKind
    path: str = "*"
    method: str | None = None
    count: int | None = 1
    latency: float = 0.0
    status: int = 503
    retry_after: int | None = 1
    status_retry_after: int | None = None
    """``Retry-After`` sent with a ``status`` fault (none by default)."""
    keep_bytes: int | None = None
    shift: int = 1
    extra: int = 1
    interval: float = 0.5
    drip_bytes: int = 1
    hits: int = 0

    @property
    def remaining(self) -> int | None:
        return None if self.count is None else max(self.count - self.hits, 0)

    @property
    def active(self) -> bool:
        return self.count is None or self.hits < self.count

    def matches(self, method: str, path: str) -> bool:
        if self.method is not None and self.method.upper() != method.upper():
            return False
        return fnmatch.fnmatchcase(path, self.path)


class LoggedRequest(NamedTuple):
    """``(method, path, range header)`` of one request."""

    method: str
    path: str
    range: str | None


@dataclass(frozen=True)
class RequestRecord:
    """Everything recorded about one request (see :attr:`HubServer.records`)."""

    method: str
    path: str  # percent-decoded, without query string
    query: str
    range: str | None
    status: int | None  # None when the connection was dropped without a response
    body_bytes: int  # response body bytes actually written to the socket
    fault: str | None  # kind of the (non-latency) fault applied, if any
    authorization: bool  # whether an Authorization header was sent
    arrived: float = 0.0  # time.monotonic() when the request arrived
    answered: float = 0.0  # time.monotonic() when the answer was written (or dropped)


@dataclass
class _Entry:
    """Mutable, internal form of a RequestRecord."""

    method: str
    path: str
    query: str
    range: str | None
    authorization: bool
    status: int | None = None
    body_bytes: int = 0
    fault: str | None = None
    generation: int = 0
    arrived: float = field(default_factory=time.monotonic)
    answered: float = 0.0

    def freeze(self) -> RequestRecord:
        return RequestRecord(
            method=self.method,
            path=self.path,
            query=self.query,
            range=self.range,
            status=self.status,
            body_bytes=self.body_bytes,
            fault=self.fault,
            authorization=self.authorization,
            arrived=self.arrived,
            answered=self.answered or self.arrived,
        )


def derive_sha(*parts: str | bytes) -> str:
    """A deterministic 40-hex "commit sha" from arbitrary parts."""
    h = hashlib.sha1()
    for part in parts:
        h.update(part.encode() if isinstance(part, str) else part)
        h.update(b"\0")
    return h.hexdigest()


def git_blob_sha1(content: bytes) -> str:
    """The git object id of a blob with this content."""
    return hashlib.sha1(b"blob %d\0" % len(content) + content).hexdigest()


def _is_sha(value: str) -> bool:
    return len(value) == 40 and set(value) <= _HEX


def repo_from_folder(
    folder: str | os.PathLike[str], *, skip_git: bool = True
) -> dict[str, FileSource]:
    """Map every file under ``folder`` (recursively) to its path.

    Keys are POSIX paths relative to ``folder``; ``.git`` directories are skipped
    unless ``skip_git=False``.
    """
    root = Path(folder)
    if not root.is_dir():
        raise NotADirectoryError(str(root))
    files: dict[str, FileSource] = {}
    for path in sorted(root.rglob("*")):
        if not path.is_file():
            continue
        rel = path.relative_to(root).as_posix()
        if skip_git and (rel == ".git" or rel.startswith(".git/") or "/.git/" in f"/{rel}"):
            continue
        files[rel] = path
    return files


@dataclass
class RepoSpec:
    """A model repository: commits (sha -> files), branches and tags (name -> sha).

    ``gated`` repos answer 401 ``GatedRepo`` (403 for a wrong token) and
    ``private`` repos 401 ``RepoNotFound`` unless the request carries
    ``Authorization: Bearer <t>`` with ``t`` in ``tokens``. A repo must have a
    ``main`` branch. Specs may be mutated while the server runs (e.g.
    ``add_commit`` to move ``main``).
    """

    repo_id: str
    commits: dict[str, Mapping[str, FileSource]] = field(default_factory=dict)
    branches: dict[str, str] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)
    gated: bool = False
    private: bool = False
    tokens: tuple[str, ...] = ()
    lfs_patterns: tuple[str, ...] = DEFAULT_LFS_PATTERNS

    @classmethod
    def from_files(
        cls,
        repo_id: str,
        files: Mapping[str, FileSource],
        *,
        sha: str | None = None,
        tags: Iterable[str] = (),
        gated: bool = False,
        private: bool = False,
        token: str | None = None,
        lfs_patterns: tuple[str, ...] = DEFAULT_LFS_PATTERNS,
    ) -> RepoSpec:
        """A repo with one commit on ``main`` (and the given tags)."""
        spec = cls(
            repo_id=repo_id,
            gated=gated,
            private=private,
            tokens=(token,) if token else (),
            lfs_patterns=lfs_patterns,
        )
        spec.add_commit(files, sha=sha, tags=tags)
        return spec

    @classmethod
    def from_folder(cls, repo_id: str, folder: str | os.PathLike[str], **kwargs: Any) -> RepoSpec:
        """``from_files(repo_id, repo_from_folder(folder), **kwargs)``."""
        return cls.from_files(repo_id, repo_from_folder(folder), **kwargs)

    def add_commit(
        self,
        files: Mapping[str, FileSource],
        *,
        sha: str | None = None,
        branch: str | None = "main",
        tags: Iterable[str] = (),
    ) -> str:
        """Add a commit, point ``branch`` (if any) and ``tags`` at it; return its sha."""
        checked: dict[str, FileSource] = {}
        for path, source in files.items():
            if isinstance(source, str) or not isinstance(source, (bytes, os.PathLike, SparseFile)):
                raise TypeError(
                    f"{path!r}: a file source must be bytes, a pathlib.Path (os.PathLike) or a"
                    f" SparseFile, not {type(source).__name__} (use Path(...) for a path or"
                    " .encode() for content)"
                )
            norm = path.strip("/")
            if not norm or ".." in norm.split("/"):
                raise ValueError(f"invalid path in repo: {path!r}")
            checked[norm] = source
        if sha is None:
            listing = sorted(f"{p}:{_source_size(s)}" for p, s in checked.items())
            sha = derive_sha(self.repo_id, str(len(self.commits)), *listing)
        sha = sha.lower()
        if not _is_sha(sha):
            raise ValueError(f"commit sha must be 40 hex characters: {sha!r}")
        self.commits[sha] = checked
        if branch is not None:
            self.branches[branch] = sha
        for tag in tags:
            self.tags[tag] = sha
        return sha

    @property
    def sha(self) -> str:
        """The commit ``main`` points at."""
        return self.branches["main"]

    def resolve(self, revision: str) -> str | None:
        """Commit sha of a branch, tag, ``refs/heads/x``, ``refs/tags/x`` or full sha."""
        if revision in self.branches:
            return self.branches[revision]
        if revision in self.tags:
            return self.tags[revision]
        if revision.startswith("refs/heads/") and revision[11:] in self.branches:
            return self.branches[revision[11:]]
        if revision.startswith("refs/tags/") and revision[10:] in self.tags:
            return self.tags[revision[10:]]
        if revision.lower() in self.commits:
            return revision.lower()
        return None

    def is_lfs(self, path: str) -> bool:
        name = path.rsplit("/", 1)[-1]
        return any(
            fnmatch.fnmatchcase(name, p) or fnmatch.fnmatchcase(path, p) for p in self.lfs_patterns
        )

    def authorized(self, authorization: str | None) -> bool:
        if not (self.gated or self.private):
            return True
        if not authorization or not authorization.lower().startswith("bearer "):
            return False
        return authorization[7:].strip() in self.tokens


def _source_size(source: FileSource) -> int:
    if isinstance(source, bytes):
        return len(source)
    if isinstance(source, SparseFile):
        return source.size
    return os.stat(source).st_size


class _Blob:
    """Lazily measured and hashed content of one file at one commit."""

    def __init__(self, source: FileSource) -> None:
        self.source = source
        self._lock = threading.Lock()
        self._size: int | None = None
        self._sha256: str | None = None
        self._git_sha1: str | None = None
        self._parameters: Counter[str] | None = None

    @property
    def size(self) -> int:
        if self._size is None:
            self._size = _source_size(self.source)
        return self._size

    def iter_bytes(self, start: int, stop: int) -> Iterator[bytes]:
        """Yield the bytes ``[start, stop)`` in chunks."""
        src = self.source
        stop = min(stop, self.size)
        if start >= stop:
            return
        if isinstance(src, bytes):
            for pos in range(start, stop, _CHUNK):
                yield src[pos : min(pos + _CHUNK, stop)]
        elif isinstance(src, SparseFile):
            pos = start
            while pos < stop:
                end = min(pos + _CHUNK, stop)
                if pos < len(src.head):
                    end = min(end, len(src.head))
                    yield src.head[pos:end]
                else:
                    yield bytes(end - pos)
                pos = end
        else:
            with open(src, "rb") as f:
                f.seek(start)
                pos = start
                while pos < stop:
                    data = f.read(min(_CHUNK, stop - pos))
                    if not data:
                        break
                    yield data
                    pos += len(data)

    def read(self, start: int = 0, stop: int | None = None) -> bytes:
        return b"".join(self.iter_bytes(start, self.size if stop is None else stop))

    @property
    def parameters(self) -> Counter[str]:
        """A safetensors file's parameter count by dtype, measured once: the Hub stores it
        rather than parsing every header again for each listing."""
        with self._lock:
            if self._parameters is None:
                self._parameters = _safetensors_parameters(self)
            return self._parameters

    @property
    def sha256(self) -> str:
        with self._lock:
            if self._sha256 is None:
                src = self.source
                if isinstance(src, SparseFile):
                    self._sha256 = (
                        src.sha256
                        or hashlib.sha256(b"sparse\0%d\0" % src.size + src.head).hexdigest()
                    )
                else:
                    h = hashlib.sha256()
                    for chunk in self.iter_bytes(0, self.size):
                        h.update(chunk)
                    self._sha256 = h.hexdigest()
            return self._sha256

    @property
    def git_sha1(self) -> str:
        with self._lock:
            if self._git_sha1 is None:
                src = self.source
                if isinstance(src, SparseFile):
                    self._git_sha1 = derive_sha(b"sparse-blob", src.head, str(src.size))
                else:
                    h = hashlib.sha1(b"blob %d\0" % self.size)
                    for chunk in self.iter_bytes(0, self.size):
                        h.update(chunk)
                    self._git_sha1 = h.hexdigest()
            return self._git_sha1

    def lfs_pointer(self) -> bytes:
        return (
            "version https://git-lfs.github.com/spec/v1\n"
            f"oid sha256:{self.sha256}\nsize {self.size}\n"
        ).encode()


@dataclass
class _Response:
    status: int
    headers: list[tuple[str, str]] = field(default_factory=list)
    body: bytes = b""
    blob: _Blob | None = None
    start: int = 0
    stop: int = 0  # exclusive, for blob bodies
    close: bool = False

    @property
    def length(self) -> int:
        return self.stop - self.start if self.blob is not None else len(self.body)

    def iter_body(self) -> Iterator[bytes]:
        if self.blob is not None:
            yield from self.blob.iter_bytes(self.start, self.stop)
        elif self.body:
            yield self.body


def _json_response(status: int, payload: Any, headers: Iterable[tuple[str, str]] = ()) -> _Response:
    return _Response(
        status,
        [("Content-Type", "application/json; charset=utf-8"), *headers],
        json.dumps(payload).encode(),
    )


def _error(
    status: int, message: str, code: str | None = None, headers: Iterable[tuple[str, str]] = ()
) -> _Response:
    extra = [("X-Error-Message", message), *headers]
    if code is not None:
        extra.insert(0, ("X-Error-Code", code))
    return _json_response(status, {"error": message}, extra)


def _truthy(value: str | None) -> bool:
    return value is not None and value.strip().lower() in ("1", "true", "yes", "on")


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, hub: HubServer) -> None:
        self.hub = hub
        super().__init__(("127.0.0.1", 0), _Handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that hangs up mid-answer (as qarm does on an ignored Range) is expected:
        say nothing, rather than print into whatever stderr the client's test is capturing."""
        if isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            return
        super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "hubserver/1.0"
    timeout = 60  # idle keep-alive connections end after this
    disable_nagle_algorithm = True  # headers and body are separate writes: avoid 40 ms stalls

    @property
    def hub(self) -> HubServer:
        return cast(_HTTPServer, self.server).hub

    def setup(self) -> None:
        super().setup()
        self.hub._track(self.connection, add=True)

    def finish(self) -> None:
        try:
            super().finish()
        except OSError:
            pass
        finally:
            self.hub._track(self.connection, add=False)

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self._handle("GET")

    def do_HEAD(self) -> None:
        self._handle("HEAD")

    def do_POST(self) -> None:
        self._handle("POST")

    def do_PUT(self) -> None:
        self._handle("PUT")

    def do_DELETE(self) -> None:
        self._handle("DELETE")

    def do_PATCH(self) -> None:
        self._handle("PATCH")

    def do_OPTIONS(self) -> None:
        self._handle("OPTIONS")

    # -- request plumbing -------------------------------------------------

    def _read_body(self) -> bytes:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            chunks = []
            while True:
                line = self.rfile.readline()
                size = int(line.split(b";", 1)[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    break
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
            return b"".join(chunks)
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length > 0 else b""

    def _handle(self, method: str) -> None:
        hub = self.hub
        raw_path, _, query = self.path.partition("?")
        path = urllib.parse.unquote(raw_path)
        # Recorded on arrival and updated in place *before* each write, so that the
        # counters are settled by the time the client has seen the response.
        entry = hub._record_start(
            _Entry(
                method=method,
                path=path,
                query=query,
                range=self.headers.get("Range"),
                authorization=self.headers.get("Authorization") is not None,
            )
        )
        try:
            body = self._read_body()
            delay = sum(
                f.latency for f in hub._take_faults({"latency"}, method, path, all_matching=True)
            )
            if delay > 0:
                time.sleep(delay)
            fault = next(iter(hub._take_faults(_PRE_KINDS, method, path)), None)
            if fault is not None:
                entry.fault = fault.kind
            if fault is not None and fault.kind in ("reset", "disconnect"):
                self._drop(abort=fault.kind == "reset")
                return
            if fault is not None and fault.kind == "status":
                wait = fault.status_retry_after
                asked = [] if wait is None else [("Retry-After", str(wait))]
                resp = _error(fault.status, f"Injected HTTP {fault.status}", None, asked)
            elif fault is not None and fault.kind == "rate_limit":
                headers = (
                    [] if fault.retry_after is None else [("Retry-After", str(fault.retry_after))]
                )
                resp = _error(429, "Too Many Requests (injected)", None, headers)
            elif fault is not None and fault.kind == "gated":
                resp = _error(401, "Access to this repo is restricted (injected).", "GatedRepo")
            else:
                resp, range_fault = _Router(
                    hub, method, raw_path, query, body, self.headers
                ).route()
                if range_fault is not None:
                    entry.fault = range_fault
            truncate = drip = None
            if method != "HEAD" and resp.length > 0:
                truncate = next(iter(hub._take_faults({"truncate"}, method, path)), None)
                drip = next(iter(hub._take_faults({"drip"}, method, path)), None)
            if truncate is not None:
                entry.fault = "truncate"
            elif drip is not None:
                entry.fault = "drip"
            entry.status = resp.status
            self._send(method, resp, truncate, entry, drip)
        except (TimeoutError, ConnectionError):
            self.close_connection = True
        finally:
            with suppress(OSError):
                self.wfile.flush()
            entry.answered = time.monotonic()

    def _drip(self, piece: bytes, drip: Fault, entry: _Entry) -> None:
        """Write ``piece`` a few bytes at a time, waiting ``drip.interval`` before each."""
        step = max(1, drip.drip_bytes)
        for at in range(0, len(piece), step):
            time.sleep(drip.interval)
            self.hub._count_bytes(entry, len(piece[at : at + step]))
            self.wfile.write(piece[at : at + step])
            self.wfile.flush()

    def _drop(self, *, abort: bool) -> None:
        self.close_connection = True
        conn = self.connection
        try:
            if abort:
                conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                conn.close()
            else:
                conn.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def _send(
        self,
        method: str,
        resp: _Response,
        truncate: Fault | None,
        entry: _Entry,
        drip: Fault | None = None,
    ) -> None:
        length = resp.length
        self.send_response(resp.status)
        for name, value in resp.headers:
            self.send_header(name, value)
        self.send_header("Content-Length", str(length))
        if resp.close or truncate is not None:
            self.send_header("Connection", "close")
            self.close_connection = True
        if method == "HEAD":
            self.end_headers()
            return
        limit = length
        if truncate is not None:
            keep = truncate.keep_bytes if truncate.keep_bytes is not None else length // 2
            limit = max(0, min(keep, length - 1))
        sent = 0
        headers_sent = False
        for chunk in resp.iter_body():
            if sent >= limit:
                break
            piece = chunk[: limit - sent]
            if drip is None:
                self.hub._count_bytes(entry, len(piece))
            if not headers_sent:  # headers go out only once the first chunk is counted
                self.end_headers()
                headers_sent = True
            if drip is not None:
                self._drip(piece, drip, entry)
            else:
                self.wfile.write(piece)
            sent += len(piece)
        if not headers_sent:
            self.end_headers()
        if truncate is not None:
            self._drop(abort=False)


class _Router:
    """Maps one request to a response (no I/O besides reading repo files)."""

    API_SUBPATHS = frozenset(
        {
            "revision",
            "tree",
            "paths-info",
            "refs",
            "safetensors-metadata",
            "resolve",
            "commits",
            "commit",
        }
    )

    def __init__(
        self, hub: HubServer, method: str, raw_path: str, query: str, body: bytes, headers: Message
    ) -> None:
        self.hub = hub
        self.method = method
        self.raw_path = raw_path
        self.query = query
        self.params = urllib.parse.parse_qs(query, keep_blank_values=True)
        self.body = body
        self.headers = headers
        self.range_fault: str | None = None

    def param(self, name: str) -> str | None:
        values = self.params.get(name)
        return values[-1] if values else None

    def route(self) -> tuple[_Response, str | None]:
        segs = [urllib.parse.unquote(s) for s in self.raw_path.split("/")[1:]]
        if self.method not in ("GET", "HEAD", "POST"):
            return _error(405, f"Method {self.method} not allowed"), None
        if len(segs) >= 3 and segs[0] == "api" and segs[1] == "models":
            return self.api(segs[2:]), None
        if segs and segs[0] == "_cdn":
            return self.cdn(segs[1:]), self.range_fault
        resp = self.resolve(segs)
        if resp is not None:
            return resp, self.range_fault
        return _error(404, f"Not found: {urllib.parse.unquote(self.raw_path)}"), None

    # -- helpers ------------------------------------------------------------

    def split_repo(self, segs: list[str], subpaths: frozenset[str]) -> tuple[str, list[str]]:
        """Split ``owner/name/rest...`` or ``name/rest...`` into (repo_id, rest)."""
        if len(segs) >= 2 and self.hub.get_repo(f"{segs[0]}/{segs[1]}") is not None:
            return f"{segs[0]}/{segs[1]}", segs[2:]
        if self.hub.get_repo(segs[0]) is not None:
            return segs[0], segs[1:]
        if len(segs) >= 2 and segs[1] not in subpaths:
            return f"{segs[0]}/{segs[1]}", segs[2:]
        return segs[0], segs[1:]

    def access(self, repo_id: str) -> tuple[RepoSpec | None, _Response | None]:
        spec = self.hub.get_repo(repo_id)
        if spec is None:
            return None, _error(404, "Repository not found", "RepoNotFound")
        auth = self.headers.get("Authorization")
        if spec.authorized(auth):
            return spec, None
        if spec.gated:
            if auth:
                msg = (
                    f"Access to model {repo_id} is restricted and you are not in the authorized"
                    " list."
                )
                return None, _error(403, msg, "GatedRepo")
            msg = (
                f"Access to model {repo_id} is restricted. You must have access to it and be"
                " authenticated to access it. Please log in."
            )
            return None, _error(401, msg, "GatedRepo")
        return None, _error(401, "Repository not found", "RepoNotFound")

    def blob(self, spec: RepoSpec, sha: str, path: str) -> _Blob | None:
        return self.hub._blob(spec, sha, path)

    # -- /api/models/... ------------------------------------------------------

    def api(self, segs: list[str]) -> _Response:
        repo_id, rest = self.split_repo(segs, self.API_SUBPATHS)
        spec, err = self.access(repo_id)
        if err is not None or spec is None:
            return err or _error(404, "Repository not found", "RepoNotFound")
        if not rest:
            return self.info(spec, "main")
        kind, args = rest[0], rest[1:]
        if kind == "revision" and args and self.method == "GET":
            return self.info(spec, "/".join(args))
        if kind == "tree" and args and self.method == "GET":
            return self.tree(spec, args)
        if kind == "paths-info" and args and self.method == "POST":
            return self.paths_info(spec, "/".join(args))
        if kind == "refs" and not args and self.method == "GET":
            return self.refs(spec)
        if kind == "safetensors-metadata" and args and self.method == "GET":
            return self.safetensors_metadata(spec, "/".join(args))
        return _error(404, f"Not found: {urllib.parse.unquote(self.raw_path)}")

    def revision(self, spec: RepoSpec, revision: str) -> tuple[str | None, _Response | None]:
        sha = spec.resolve(revision)
        if sha is None:
            return None, _error(404, f"Invalid rev id: {revision}", "RevisionNotFound")
        return sha, None

    def file_entry(
        self, spec: RepoSpec, sha: str, path: str, blob: _Blob, expand: bool
    ) -> dict[str, Any]:
        entry: dict[str, Any] = {"type": "file", "size": blob.size, "path": path}
        if spec.is_lfs(path):
            pointer = blob.lfs_pointer()
            entry["oid"] = git_blob_sha1(pointer)
            entry["lfs"] = {"oid": blob.sha256, "size": blob.size, "pointerSize": len(pointer)}
        else:
            entry["oid"] = blob.git_sha1
        if expand:
            entry["lastCommit"] = {"id": sha, "title": "Upload files", "date": _LAST_MODIFIED}
            entry["securityFileStatus"] = {
                "status": "safe",
                "avScan": {"virusFound": False, "virusNames": None},
                "pickleImportScan": None,
            }
        return entry

    @staticmethod
    def dir_entry(sha: str, path: str, expand: bool) -> dict[str, Any]:
        entry: dict[str, Any] = {
            "type": "directory",
            "oid": derive_sha("tree", sha, path),
            "size": 0,
            "path": path,
        }
        if expand:
            entry["lastCommit"] = {"id": sha, "title": "Upload files", "date": _LAST_MODIFIED}
        return entry

    def info(self, spec: RepoSpec, revision: str) -> _Response:
        sha, err = self.revision(spec, revision)
        if err is not None or sha is None:
            return err or _error(500, "unreachable")
        files = spec.commits[sha]
        blobs_wanted = _truthy(self.param("blobs"))
        siblings: list[dict[str, Any]] = []
        used = 0
        params: Counter[str] = Counter()
        for path in sorted(files):
            blob = self.blob(spec, sha, path)
            if blob is None:
                continue
            used += blob.size
            sibling: dict[str, Any] = {"rfilename": path}
            if blobs_wanted:
                sibling["size"] = blob.size
                if spec.is_lfs(path):
                    pointer = blob.lfs_pointer()
                    sibling["blobId"] = git_blob_sha1(pointer)
                    sibling["lfs"] = {
                        "sha256": blob.sha256,
                        "size": blob.size,
                        "pointerSize": len(pointer),
                    }
                else:
                    sibling["blobId"] = blob.git_sha1
            siblings.append(sibling)
            if path.endswith(".safetensors") and self.hub.parameter_counts:
                params.update(blob.parameters)
        owner = spec.repo_id.split("/")[0] if "/" in spec.repo_id else None
        data: dict[str, Any] = {
            "_id": derive_sha("id", spec.repo_id)[:24],
            "id": spec.repo_id,
            "modelId": spec.repo_id,
            "author": owner,
            "sha": sha,
            "lastModified": _LAST_MODIFIED,
            "createdAt": _LAST_MODIFIED,
            "private": spec.private,
            "gated": "manual" if spec.gated else False,
            "disabled": False,
            "downloads": 0,
            "likes": 0,
            "tags": ["safetensors"] if any(p.endswith(".safetensors") for p in files) else [],
            "siblings": siblings,
            "usedStorage": used,
        }
        config = self.json_file(spec, sha, "config.json")
        if isinstance(config, dict):
            data["config"] = {k: config[k] for k in ("architectures", "model_type") if k in config}
        if params and self.hub.parameter_counts:
            data["safetensors"] = {"parameters": dict(params), "total": sum(params.values())}
        expand = self.params.get("expand") or self.params.get("expand[]")
        if expand:
            data = {k: v for k, v in data.items() if k in ("_id", "id") or k in expand}
        return _json_response(200, data)

    def json_file(self, spec: RepoSpec, sha: str, path: str) -> Any:
        blob = self.blob(spec, sha, path)
        if blob is None or blob.size > 16 << 20:
            return None
        try:
            return json.loads(blob.read())
        except ValueError:
            return None

    def listing(self, spec: RepoSpec, sha: str) -> tuple[dict[str, _Blob], set[str]]:
        files: dict[str, _Blob] = {}
        for path in spec.commits[sha]:
            blob = self.blob(spec, sha, path)
            if blob is not None:
                files[path] = blob
        dirs: set[str] = set()
        for path in files:
            parts = path.split("/")[:-1]
            for i in range(1, len(parts) + 1):
                dirs.add("/".join(parts[:i]))
        return files, dirs

    def tree(self, spec: RepoSpec, args: list[str]) -> _Response:
        revision, sub = args[0], "/".join(args[1:]).strip("/")
        sha, err = self.revision(spec, revision)
        if err is not None or sha is None:
            return err or _error(500, "unreachable")
        files, dirs = self.listing(spec, sha)
        if sub and sub not in dirs:
            return _error(404, f"Entry not found: {sub}", "EntryNotFound", [("X-Repo-Commit", sha)])
        recursive = _truthy(self.param("recursive"))
        expand = _truthy(self.param("expand"))
        prefix = f"{sub}/" if sub else ""

        def wanted(path: str) -> bool:
            if not path.startswith(prefix):
                return False
            return recursive or "/" not in path[len(prefix) :]

        entries = [self.dir_entry(sha, d, expand) for d in sorted(dirs) if wanted(d)]
        entries += [
            self.file_entry(spec, sha, p, b, expand) for p, b in sorted(files.items()) if wanted(p)
        ]
        page_size = max(
            1, self.hub.tree_page_size if not expand else min(50, self.hub.tree_page_size)
        )
        cursor = int(self.param("cursor") or 0)
        page = entries[cursor : cursor + page_size]
        headers: list[tuple[str, str]] = []
        if cursor + page_size < len(entries):
            params = {k: v[-1] for k, v in self.params.items()}
            params["cursor"] = str(cursor + page_size)
            next_url = f"{self.hub.endpoint}{self.raw_path}?{urllib.parse.urlencode(params)}"
            headers.append(("Link", f'<{next_url}>; rel="next"'))
        return _json_response(200, page, headers)

    def paths_info(self, spec: RepoSpec, revision: str) -> _Response:
        sha, err = self.revision(spec, revision)
        if err is not None or sha is None:
            return err or _error(500, "unreachable")
        ctype = self.headers.get("Content-Type", "")
        paths: list[str] = []
        expand = False
        if "json" in ctype:
            try:
                payload = json.loads(self.body or b"{}")
            except ValueError:
                return _error(400, "Invalid JSON body")
            raw = payload.get("paths", [])
            paths = [raw] if isinstance(raw, str) else [str(p) for p in raw]
            expand = bool(payload.get("expand"))
        else:
            form = urllib.parse.parse_qs(self.body.decode(), keep_blank_values=True)
            paths = form.get("paths", []) + form.get("paths[]", [])
            expand_values = form.get("expand") or [""]
            expand = _truthy(expand_values[-1])
        files, dirs = self.listing(spec, sha)
        out: list[dict[str, Any]] = []
        for raw_path in paths:
            p = raw_path.strip("/")
            if p in files:
                out.append(self.file_entry(spec, sha, p, files[p], expand))
            elif p in dirs:
                out.append(self.dir_entry(sha, p, expand))
        return _json_response(200, out)

    def refs(self, spec: RepoSpec) -> _Response:
        def ref(name: str, kind: str, sha: str) -> dict[str, str]:
            return {"name": name, "ref": f"refs/{kind}/{name}", "targetCommit": sha}

        data: dict[str, Any] = {
            "branches": [ref(n, "heads", s) for n, s in sorted(spec.branches.items())],
            "tags": [ref(n, "tags", s) for n, s in sorted(spec.tags.items())],
            "converts": [],
        }
        if _truthy(self.param("include_prs")):
            data["pullRequests"] = []
        return _json_response(200, data)

    def safetensors_metadata(self, spec: RepoSpec, filename: str) -> _Response:
        sha = spec.sha
        index = self.json_file(spec, sha, filename)
        if not isinstance(index, dict):
            return _error(404, f"Entry not found: {filename}", "EntryNotFound")
        folder = filename.rsplit("/", 1)[0] + "/" if "/" in filename else ""
        headers: dict[str, Any] = {}
        for shard in sorted(set(index.get("weight_map", {}).values())):
            blob = self.blob(spec, sha, folder + shard)
            header = _safetensors_header(blob) if blob is not None else None
            if header is None:
                return _error(404, f"Cannot parse safetensors header of {shard}", "EntryNotFound")
            headers[shard] = header
        index_meta = {k: v for k, v in index.items() if k != "weight_map"}
        return _json_response(200, {"index": index_meta, "headers": headers})

    # -- /{repo_id}/resolve/{rev}/{path} and the CDN ---------------------------

    def resolve(self, segs: list[str]) -> _Response | None:
        if (
            len(segs) >= 3
            and segs[1] == "resolve"
            and self.hub.get_repo(f"{segs[0]}/{segs[1]}") is None
        ):
            repo_id, rest = segs[0], segs[2:]
        elif len(segs) >= 4 and segs[2] == "resolve":
            repo_id, rest = f"{segs[0]}/{segs[1]}", segs[3:]
        else:
            return None
        if len(rest) < 2:
            return _error(404, "Missing revision or file path")
        spec, err = self.access(repo_id)
        if err is not None or spec is None:
            return err or _error(404, "Repository not found", "RepoNotFound")
        revision, path_parts = rest[0], rest[1:]
        sha = spec.resolve(revision)
        # Unencoded multi-segment revisions such as refs/pr/1 or refs/heads/x.
        n = 1
        while sha is None and n < min(3, len(path_parts)):
            candidate = "/".join([revision, *path_parts[:n]])
            sha = spec.resolve(candidate)
            if sha is not None:
                revision, path_parts = candidate, path_parts[n:]
            n += 1
        if sha is None:
            return _error(404, f"Invalid rev id: {revision}", "RevisionNotFound")
        path = "/".join(path_parts)
        blob = self.blob(spec, sha, path)
        commit = ("X-Repo-Commit", sha)
        if blob is None:
            return _error(404, "Entry not found", "EntryNotFound", [commit])
        lfs = spec.is_lfs(path)
        headers = [commit]
        if lfs:
            headers += [
                ("X-Linked-Etag", f'"{blob.sha256}"'),
                ("X-Linked-Size", str(blob.size)),
                ("ETag", f'"{blob.sha256}"'),
            ]
            if self.hub.cdn_redirect:
                location = self.hub.cdn_url(spec.repo_id, sha, path)
                return _Response(302, [*headers, ("Location", location)])
        else:
            headers.append(("ETag", f'"{blob.git_sha1}"'))
        return self.serve(blob, path, headers)

    def cdn(self, segs: list[str]) -> _Response:
        for i, seg in enumerate(segs):
            if _is_sha(seg) and i > 0:
                spec = self.hub.get_repo("/".join(segs[:i]))
                if spec is not None and seg in spec.commits:
                    path = "/".join(segs[i + 1 :])
                    blob = self.blob(spec, seg, path)
                    if blob is not None:
                        return self.serve(blob, path, [("ETag", f'"{blob.sha256}"')])
        return _error(404, "NoSuchKey")

    def serve(self, blob: _Blob, path: str, headers: list[tuple[str, str]]) -> _Response:
        size = blob.size
        ctype = "application/json" if path.endswith(".json") else "application/octet-stream"
        headers = [*headers, ("Accept-Ranges", "bytes"), ("Content-Type", ctype)]
        range_header = self.headers.get("Range")
        if self.method == "HEAD" or range_header is None:
            return _Response(200, headers, blob=blob, start=0, stop=size)
        parsed = _parse_range(range_header, size)
        if parsed is None:
            return _error(
                416,
                f"Requested range not satisfiable: {range_header}",
                None,
                [("Content-Range", f"bytes */{size}")],
            )
        start, end = parsed  # inclusive end
        url_path = urllib.parse.unquote(self.raw_path)
        fault = next(
            iter(
                self.hub._take_faults(
                    {"ignore_range", "wrong_range", "oversize_range"}, self.method, url_path
                )
            ),
            None,
        )
        if fault is not None and fault.kind == "ignore_range":
            self.range_fault = "ignore_range"
            return _Response(200, headers, blob=blob, start=0, stop=size)
        if fault is not None and fault.kind == "oversize_range":
            self.range_fault = "oversize_range"
            headers.append(("Content-Range", f"bytes {start}-{end}/{size}"))
            return _Response(206, headers, blob.read(start, end + 1) + bytes(fault.extra))
        if fault is not None and fault.kind == "wrong_range":
            self.range_fault = "wrong_range"
            start, end = _shift_range(start, end, size, fault.shift)
        headers.append(("Content-Range", f"bytes {start}-{end}/{size}"))
        return _Response(206, headers, blob=blob, start=start, stop=end + 1)


def _parse_range(header: str, size: int) -> tuple[int, int] | None:
    """Inclusive (start, end) of a single ``bytes=`` range, or None if unsatisfiable/unsupported."""
    unit, _, spec = header.strip().partition("=")
    if unit.strip().lower() != "bytes" or "," in spec:
        return None
    first, sep, last = spec.strip().partition("-")
    first, last = first.strip(), last.strip()
    if not sep or (first and not first.isdigit()) or (last and not last.isdigit()):
        return None
    if not first:
        if not last or int(last) == 0 or size == 0:
            return None
        return max(0, size - int(last)), size - 1
    start = int(first)
    end = int(last) if last else size - 1
    if start >= size or end < start:
        return None
    return start, min(end, size - 1)


def _shift_range(start: int, end: int, size: int, shift: int) -> tuple[int, int]:
    """A range inside the file that differs from (start, end)."""
    length = end - start
    for delta in (shift, -shift):
        s, e = start + delta, end + delta
        if delta != 0 and s >= 0 and e <= size - 1:
            return s, e
    if length > 0:
        return start, end - 1  # shorter than asked
    return start, end  # a 1-byte file: nothing else to answer


def _safetensors_header(blob: _Blob) -> dict[str, Any] | None:
    if blob.size < 8:
        return None
    (n,) = struct.unpack("<Q", blob.read(0, 8))
    if n > 100_000_000 or 8 + n > blob.size:
        return None
    try:
        header = json.loads(blob.read(8, 8 + n))
    except ValueError:
        return None
    return header if isinstance(header, dict) else None


def _safetensors_parameters(blob: _Blob) -> Counter[str]:
    out: Counter[str] = Counter()
    header = _safetensors_header(blob)
    if header is None:
        return out
    for name, info in header.items():
        if name == "__metadata__" or not isinstance(info, dict):
            continue
        try:
            out[str(info["dtype"])] += math.prod(int(d) for d in info["shape"])
        except (KeyError, TypeError, ValueError):
            continue
    return out


class HubServer:
    """A threaded Hub-compatible server on 127.0.0.1 (ephemeral port).

    Usage::

        with HubServer({"org/model": RepoSpec.from_folder("org/model", folder)}) as hub:
            HfApi(endpoint=hub.endpoint).model_info("org/model", files_metadata=True)
    """

    def __init__(
        self,
        repos: Mapping[str, RepoSpec] | None = None,
        *,
        cdn_redirect: bool = False,
        cdn_host: str = "localhost",
        latency: float = 0.0,
        tree_page_size: int = 1000,
        parameter_counts: bool = True,
    ) -> None:
        self._lock = threading.Lock()
        self._repos: dict[str, RepoSpec] = {}
        self._blobs: dict[tuple[str, str, str], tuple[FileSource, _Blob]] = {}
        self._faults: list[Fault] = []
        self._records: list[_Entry] = []
        self._generation = 0
        self._bytes_sent = 0
        self._bytes_by_path: Counter[str] = Counter()
        self._conns: set[socket.socket] = set()
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.cdn_redirect = cdn_redirect
        self.cdn_host = cdn_host
        self.tree_page_size = tree_page_size
        self.parameter_counts = parameter_counts
        """Whether ``model_info`` reports the safetensors parameter count (``safetensors``), as
        the Hub does; Hub-compatible servers often do not."""
        for repo_id, spec in (repos or {}).items():
            if repo_id != spec.repo_id:
                raise ValueError(f"key {repo_id!r} != RepoSpec.repo_id {spec.repo_id!r}")
            self.add_repo(spec)
        if latency > 0:
            self.add_latency(latency)

    # -- lifecycle ----------------------------------------------------------

    def start(self) -> Self:
        if self._httpd is not None:
            return self
        self._httpd = _HTTPServer(self)
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": 0.05},
            name="hubserver",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        httpd, self._httpd = self._httpd, None
        if httpd is None:
            return
        httpd.shutdown()
        httpd.server_close()
        with self._lock:
            conns = list(self._conns)
        for conn in conns:  # wake handler threads blocked on idle keep-alive connections
            with suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    @property
    def port(self) -> int:
        if self._httpd is None:
            raise RuntimeError("HubServer is not started")
        return int(self._httpd.server_address[1])

    @property
    def endpoint(self) -> str:
        """``http://127.0.0.1:<port>`` (no trailing slash)."""
        return f"http://127.0.0.1:{self.port}"

    def url(self, repo_id: str, filename: str, revision: str = "main") -> str:
        """The ``/resolve`` URL of a file, quoted like ``huggingface_hub.hf_hub_url``."""
        rev = urllib.parse.quote(revision, safe="")
        return f"{self.endpoint}/{repo_id}/resolve/{rev}/{urllib.parse.quote(filename)}"

    def cdn_url(self, repo_id: str, sha: str, filename: str) -> str:
        return f"http://{self.cdn_host}:{self.port}/_cdn/{repo_id}/{sha}/{urllib.parse.quote(filename)}"

    # -- repos --------------------------------------------------------------

    def add_repo(self, spec: RepoSpec) -> RepoSpec:
        """Add (or replace) a repository; thread-safe, works while running."""
        if "main" not in spec.branches:
            raise ValueError(f"repo {spec.repo_id!r} has no 'main' branch")
        for name, sha in [*spec.branches.items(), *spec.tags.items()]:
            if sha not in spec.commits:
                raise ValueError(f"ref {name!r} of {spec.repo_id!r} points at unknown commit {sha}")
        with self._lock:
            self._repos[spec.repo_id] = spec
        return spec

    def get_repo(self, repo_id: str) -> RepoSpec | None:
        with self._lock:
            return self._repos.get(repo_id)

    @property
    def repos(self) -> dict[str, RepoSpec]:
        with self._lock:
            return dict(self._repos)

    def _blob(self, spec: RepoSpec, sha: str, path: str) -> _Blob | None:
        files = spec.commits.get(sha)
        source = files.get(path) if files is not None else None
        if source is None:
            return None
        key = (spec.repo_id, sha, path)
        with self._lock:
            cached = self._blobs.get(key)
            if cached is not None and cached[0] is source:
                return cached[1]
            blob = _Blob(source)
            self._blobs[key] = (source, blob)
            return blob

    # -- faults -------------------------------------------------------------

    def add_fault(self, fault: Fault) -> Fault:
        with self._lock:
            self._faults.append(fault)
        return fault

    def add_latency(
        self,
        seconds: float,
        *,
        path: str = "*",
        method: str | None = None,
        count: int | None = None,
    ) -> Fault:
        return self.add_fault(
            Fault("latency", path=path, method=method, count=count, latency=seconds)
        )

    def fail(
        self,
        status: int = 503,
        *,
        path: str = "*",
        method: str | None = None,
        count: int | None = 1,
        retry_after: int | None = None,
    ) -> Fault:
        """Answer ``status`` (with ``Retry-After: retry_after`` where given)."""
        return self.add_fault(
            Fault(
                "status",
                path=path,
                method=method,
                count=count,
                status=status,
                status_retry_after=retry_after,
            )
        )

    def rate_limit(
        self,
        retry_after: int | None = 1,
        *,
        path: str = "*",
        method: str | None = None,
        count: int | None = 1,
    ) -> Fault:
        return self.add_fault(
            Fault("rate_limit", path=path, method=method, count=count, retry_after=retry_after)
        )

    def reset_connection(
        self, *, path: str = "*", method: str | None = None, count: int | None = 1
    ) -> Fault:
        return self.add_fault(Fault("reset", path=path, method=method, count=count))

    def disconnect(
        self, *, path: str = "*", method: str | None = None, count: int | None = 1
    ) -> Fault:
        return self.add_fault(Fault("disconnect", path=path, method=method, count=count))

    def truncate(
        self,
        keep_bytes: int | None = None,
        *,
        path: str = "*",
        method: str | None = None,
        count: int | None = 1,
    ) -> Fault:
        return self.add_fault(
            Fault("truncate", path=path, method=method, count=count, keep_bytes=keep_bytes)
        )

    def wrong_content_range(
        self, shift: int = 1, *, path: str = "*", method: str | None = None, count: int | None = 1
    ) -> Fault:
        return self.add_fault(
            Fault("wrong_range", path=path, method=method, count=count, shift=shift)
        )

    def oversize_range(
        self, extra: int = 1, *, path: str = "*", method: str | None = None, count: int | None = 1
    ) -> Fault:
        return self.add_fault(
            Fault("oversize_range", path=path, method=method, count=count, extra=extra)
        )

    def ignore_range(
        self, *, path: str = "*", method: str | None = None, count: int | None = 1
    ) -> Fault:
        return self.add_fault(Fault("ignore_range", path=path, method=method, count=count))

    def drip(
        self,
        interval: float = 0.5,
        drip_bytes: int = 1,
        *,
        path: str = "*",
        method: str | None = None,
        count: int | None = None,
    ) -> Fault:
        """Send bodies ``drip_bytes`` at a time, one piece every ``interval`` seconds (a server
        that keeps a connection busy far longer than any read timeout would notice)."""
        return self.add_fault(
            Fault(
                "drip",
                path=path,
                method=method,
                count=count,
                interval=interval,
                drip_bytes=drip_bytes,
            )
        )

    def gate(self, *, path: str = "*", method: str | None = None, count: int | None = 1) -> Fault:
        return self.add_fault(Fault("gated", path=path, method=method, count=count))

    def clear_faults(self) -> None:
        with self._lock:
            self._faults.clear()

    @property
    def faults(self) -> list[Fault]:
        with self._lock:
            return list(self._faults)

    def _take_faults(
        self, kinds: Iterable[str], method: str, path: str, *, all_matching: bool = False
    ) -> list[Fault]:
        kinds = frozenset(kinds)
        taken: list[Fault] = []
        with self._lock:
            for fault in self._faults:
                if fault.kind in kinds and fault.active and fault.matches(method, path):
                    fault.hits += 1
                    taken.append(fault)
                    if not all_matching:
                        break
        return taken

    # -- counters -----------------------------------------------------------

    def _track(self, conn: socket.socket, *, add: bool) -> None:
        with self._lock:
            if add:
                self._conns.add(conn)
            else:
                self._conns.discard(conn)

    def _record_start(self, entry: _Entry) -> _Entry:
        with self._lock:
            entry.generation = self._generation
            self._records.append(entry)
        return entry

    def _count_bytes(self, entry: _Entry, n: int) -> None:
        with self._lock:
            entry.body_bytes += n
            if entry.generation == self._generation:  # not reset since the request arrived
                self._bytes_sent += n
                self._bytes_by_path[entry.path] += n

    def reset_counters(self) -> None:
        """Zero every counter and the request log (faults are kept)."""
        with self._lock:
            self._records.clear()
            self._generation += 1
            self._bytes_sent = 0
            self._bytes_by_path.clear()

    @property
    def request_count(self) -> int:
        with self._lock:
            return len(self._records)

    @property
    def requests(self) -> Counter[tuple[str, str]]:
        """Number of requests per (method, decoded path)."""
        with self._lock:
            return Counter((r.method, r.path) for r in self._records)

    def count(self, method: str | None = None, path: str = "*") -> int:
        """Number of requests with this method (any if None) whose path matches the glob."""
        with self._lock:
            return sum(
                1
                for r in self._records
                if (method is None or r.method == method.upper())
                and fnmatch.fnmatchcase(r.path, path)
            )

    @property
    def bytes_sent(self) -> int:
        """Response body bytes written to sockets (headers excluded)."""
        with self._lock:
            return self._bytes_sent

    @property
    def bytes_by_path(self) -> Counter[str]:
        with self._lock:
            return Counter(self._bytes_by_path)

    @property
    def log(self) -> list[LoggedRequest]:
        """``(method, path, range header)`` of every request, in arrival order."""
        with self._lock:
            return [LoggedRequest(r.method, r.path, r.range) for r in self._records]

    @property
    def records(self) -> list[RequestRecord]:
        with self._lock:
            return [r.freeze() for r in self._records]


@contextmanager
def point_huggingface_hub_at(
    endpoint: str, *, cache_dir: str | os.PathLike[str] | None = None, disable_token: bool = True
) -> Iterator[None]:
    """Point an already imported ``huggingface_hub`` (2.4) at ``endpoint``, then restore it.

    ``HF_ENDPOINT`` is read once, at import, into ``huggingface_hub.constants``;
    this patches ``constants.ENDPOINT``, ``constants.HUGGINGFACE_CO_URL_TEMPLATE``
    (used by ``hf_hub_url``/``hf_hub_download``), the module-level ``HfApi``
    instance behind ``huggingface_hub.model_info`` & co. (its ``endpoint`` was
    fixed at import) and the ``HF_ENDPOINT`` environment variable (for
    subprocesses). With ``cache_dir`` it also sets ``constants.HF_HUB_CACHE`` and
    ``HF_HUB_CACHE``. With ``disable_token`` the implicit token (``HF_TOKEN`` /
    token file) is hidden so only explicit ``token=`` arguments are sent.
    ``HfApi(...)`` objects created *before* this call keep their endpoint.
    huggingface_hub is imported lazily; this module itself needs only the
    standard library.
    """
    constants = importlib.import_module("huggingface_hub.constants")
    hf_api = importlib.import_module("huggingface_hub.hf_api")
    endpoint = endpoint.rstrip("/")
    saved_attrs: list[tuple[object, str, object]] = []
    saved_env: dict[str, str | None] = {}

    def set_attr(obj: object, name: str, value: object) -> None:
        saved_attrs.append((obj, name, getattr(obj, name)))
        setattr(obj, name, value)

    def set_env(name: str, value: str | None) -> None:
        saved_env.setdefault(name, os.environ.get(name))
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value

    try:
        set_attr(constants, "ENDPOINT", endpoint)
        template = endpoint + "/{repo_id}/resolve/{revision}/{filename}"
        set_attr(constants, "HUGGINGFACE_CO_URL_TEMPLATE", template)
        set_attr(hf_api.api, "endpoint", endpoint)
        set_env("HF_ENDPOINT", endpoint)
        set_env("HF_HUB_DISABLE_TELEMETRY", "1")
        set_attr(constants, "HF_HUB_DISABLE_TELEMETRY", True)
        set_env("HF_HUB_OFFLINE", None)
        set_attr(constants, "HF_HUB_OFFLINE", False)
        if cache_dir is not None:
            set_attr(constants, "HF_HUB_CACHE", str(cache_dir))
            set_env("HF_HUB_CACHE", str(cache_dir))
        if disable_token:
            set_env("HF_TOKEN", None)
            set_env("HUGGING_FACE_HUB_TOKEN", None)
            missing = os.path.join(
                tempfile.gettempdir(), f"hubserver-no-token-{os.getpid()}-{id(saved_env)}"
            )
            set_attr(constants, "HF_TOKEN_PATH", missing)
            set_attr(hf_api.api, "token", None)
        yield
    finally:
        for obj, name, value in reversed(saved_attrs):
            setattr(obj, name, value)
        for name, old in saved_env.items():
            if old is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = old
