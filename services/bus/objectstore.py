"""A small S3-compatible object store on a local folder: the embedded broker's durable storage.

Tansu, the embedded broker, keeps its topics, offsets and consumer groups in an object store (its `s3://`
storage engine, object_store's AmazonS3 client with conditional puts). This serves the part of the S3 API
that client uses, from files under one folder:

    with ObjectStore(Path("out/up/broker")) as store:    # 127.0.0.1, a free port
        print(store.endpoint)                           # "http://127.0.0.1:PORT"

An acknowledged write is durable: the object is written to a staging file, fsynced, renamed over the key's
file and its folder fsynced before the reply, so a process (the broker, this server, the machine's power
aside) dying at any moment leaves each object whole, old or new. Conditional writes (`If-None-Match: *`,
`If-Match: ETAG`) are decided under a lock per key, which is what keeps the broker's metadata consistent.

Served: bucket create/head/list (ListObjectsV2 with prefix, delimiter, pagination), object put (plain,
conditional, copy), get (ranges, conditional), head, delete and multi-delete. Anything else is 501
NotImplemented, logged. Like the broker it serves, it authenticates no one: it listens on loopback only,
its files are its owner's alone (0700 folders), and keys cannot leave its folder.
"""

from __future__ import annotations

import logging
import os
import threading
import urllib.parse
from datetime import UTC, datetime
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from xml.etree import ElementTree
from xml.sax.saxutils import escape

from services.bus.bucket import Bucket, S3Error, etag_of

log = logging.getLogger(__name__)
NS = "http://s3.amazonaws.com/doc/2006-03-01/"
MAX_BODY = 256 * 1024 * 1024  # one object: a broker's record batch is at most a few MiB
STRIPES = 64  # per-key locks, by hash


class ObjectStore:
    """The store's folder and its server: `start()` listens, `stop()` closes; a context manager too."""

    def __init__(self, root: Path, port: int = 0, host: str = "127.0.0.1") -> None:
        self.root, self.host, self.port = Path(root), host, port
        self.server: ThreadingHTTPServer | None = None
        self._locks = [threading.Lock() for _ in range(STRIPES)]
        self._thread: threading.Thread | None = None

    @property
    def endpoint(self) -> str:
        return f"http://{self.host}:{self.port}"

    def lock(self, bucket: str, key: str) -> threading.Lock:
        return self._locks[hash((bucket, key)) % STRIPES]

    def bucket(self, name: str, create: bool = False) -> Bucket:
        if not (3 <= len(name) <= 63) or not all(c.islower() or c.isdigit() or c in ".-" for c in name):
            raise S3Error(400, "InvalidBucketName", f"bucket {name[:80]!r}: 3-63 of a-z, 0-9, '.', '-'")
        folder = self.root / "buckets" / name
        if create:
            folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        elif not folder.is_dir():
            raise S3Error(404, "NoSuchBucket", f"no bucket {name!r}")
        return Bucket(folder, self.root / "staging")

    def start(self) -> ObjectStore:
        for folder in (self.root, self.root / "buckets", self.root / "staging"):
            folder.mkdir(mode=0o700, parents=True, exist_ok=True)
            os.chmod(folder, 0o700)
        for leftover in (self.root / "staging").iterdir():  # a write cut off by a crash: never acknowledged
            leftover.unlink(missing_ok=True)
        store = self

        class Handler(_Handler):
            objects = store

        self.server = ThreadingHTTPServer((self.host, self.port), Handler)
        self.server.daemon_threads = True
        self.port = int(self.server.server_address[1])
        self._thread = threading.Thread(target=self.server.serve_forever, name="object-store", daemon=True)
        self._thread.start()
        log.info("object store at %s on %s", self.endpoint, self.root)
        return self

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None

    def __enter__(self) -> ObjectStore:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class _Handler(BaseHTTPRequestHandler):
    """Decodes one S3 request, calls the bucket, encodes the reply; S3Error becomes S3's XML error."""

    objects: ObjectStore
    protocol_version = "HTTP/1.1"  # keep-alive: the broker's client reuses connections
    # headers and body leave in two writes: with Nagle's algorithm the body waited for the client's delayed ACK,
    # 40 ms a GET (a consumer read 27 record batches a second)
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s " + format, self.client_address[0], *args)

    def do_GET(self) -> None:
        self._route("GET")

    def do_HEAD(self) -> None:
        self._route("HEAD")

    def do_PUT(self) -> None:
        self._route("PUT")

    def do_DELETE(self) -> None:
        self._route("DELETE")

    def do_POST(self) -> None:
        self._route("POST")

    def _route(self, method: str) -> None:
        url = urllib.parse.urlsplit(self.path)
        query = urllib.parse.parse_qs(url.query, keep_blank_values=True)
        bucket_name, _, key = urllib.parse.unquote(url.path).lstrip("/").partition("/")
        try:
            body = self._body() if method in ("PUT", "POST") else b""
            if key:
                self._object(method, bucket_name, key, query, body)
            else:
                self._bucket(method, bucket_name, query, body)
        except S3Error as e:
            self._error(e)
        except OSError as e:
            log.error("object store: %s %s failed: %s", method, url.path, e)
            self._error(S3Error(500, "InternalError", f"{type(e).__name__}: {e.strerror or e}"))

    def _body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks, total = [], 0
            while (size := int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)) > 0:
                total += size
                if total > MAX_BODY:
                    raise S3Error(413, "EntityTooLarge", f"over {MAX_BODY} bytes")
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
            while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                pass
            return b"".join(chunks)
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY:
            self.close_connection = True
            raise S3Error(413, "EntityTooLarge", f"{length} bytes is over {MAX_BODY}")
        return self.rfile.read(length)

    # --- buckets ---------------------------------------------------------------------------

    def _bucket(self, method: str, name: str, query: dict[str, list[str]], body: bytes) -> None:
        if method == "PUT":
            self.objects.bucket(name, create=True)
            self._reply(200, b"", {"Location": f"/{name}"})
        elif method == "HEAD":
            self.objects.bucket(name)
            self._reply(200, b"")
        elif method == "GET" and "location" not in query and "uploads" not in query:
            self._list(self.objects.bucket(name), query)
        elif method == "POST" and "delete" in query:
            self._delete_many(name, body)
        else:
            self._unsupported(method)

    def _list(self, bucket: Bucket, query: dict[str, list[str]]) -> None:
        one = {k: v[0] for k, v in query.items()}
        prefix, delimiter = one.get("prefix", ""), one.get("delimiter", "")
        after = max(one.get("start-after", ""), urllib.parse.unquote(one.get("continuation-token", "")))
        try:
            limit = max(1, min(1000, int(one.get("max-keys", "1000"))))
        except ValueError:
            raise S3Error(400, "InvalidArgument", f"max-keys: not a number: {one['max-keys'][:40]!r}") from None
        objects, prefixes, last = bucket.scan(prefix, delimiter, after, limit)
        xml = [f'<ListBucketResult xmlns="{NS}"><Name>{escape(bucket.root.name)}</Name>',
               f"<Prefix>{escape(prefix)}</Prefix><KeyCount>{len(objects) + len(prefixes)}</KeyCount>",
               f"<MaxKeys>{limit}</MaxKeys><IsTruncated>{'true' if last else 'false'}</IsTruncated>"]  # fmt: skip
        if delimiter:
            xml.append(f"<Delimiter>{escape(delimiter)}</Delimiter>")
        if last:
            xml.append(f"<NextContinuationToken>{escape(urllib.parse.quote(last))}</NextContinuationToken>")
        for key, stat in objects:
            xml.append(f"<Contents><Key>{escape(key)}</Key><LastModified>{_iso(stat.st_mtime)}</LastModified>"
                       f"<ETag>{escape(etag_of(stat))}</ETag><Size>{stat.st_size}</Size>"
                       "<StorageClass>STANDARD</StorageClass></Contents>")  # fmt: skip
        xml += [f"<CommonPrefixes><Prefix>{escape(p)}</Prefix></CommonPrefixes>" for p in prefixes]
        xml.append("</ListBucketResult>")
        self._xml(200, "".join(xml))

    def _delete_many(self, name: str, body: bytes) -> None:
        bucket = self.objects.bucket(name)
        try:
            keys = [e.text or "" for e in ElementTree.fromstring(body).iter() if e.tag.endswith("Key")]
        except ElementTree.ParseError as e:
            raise S3Error(400, "MalformedXML", f"the delete request is not XML: {e}") from None
        deleted = []
        for key in keys:
            with self.objects.lock(name, key):
                bucket.delete(key)
            deleted.append(f"<Deleted><Key>{escape(key)}</Key></Deleted>")
        self._xml(200, f'<DeleteResult xmlns="{NS}">{"".join(deleted)}</DeleteResult>')

    # --- objects ---------------------------------------------------------------------------

    def _object(self, method: str, name: str, key: str, query: dict[str, list[str]], body: bytes) -> None:
        if query.keys() - {"x-id"}:  # multipart uploads, tagging, ACLs...: not used by the broker
            self._unsupported(method)
            return
        bucket = self.objects.bucket(name)
        if method == "PUT":
            self._put(bucket, name, key, body)
        elif method in ("GET", "HEAD"):
            self._get(bucket, key, method == "HEAD")
        elif method == "DELETE":
            with self.objects.lock(name, key):
                bucket.delete(key)
            self._reply(204, b"")
        else:
            self._unsupported(method)

    def _put(self, bucket: Bucket, name: str, key: str, body: bytes) -> None:
        source = self.headers.get("x-amz-copy-source")
        with self.objects.lock(name, key):
            current = bucket.stat(key)
            self._preconditions(current, write=True)
            if source:
                body = self._read_source(urllib.parse.unquote(source))
            stat = bucket.write(key, body)
        tag = etag_of(stat)
        if source:
            result = f"<ETag>{escape(tag)}</ETag><LastModified>{_iso(stat.st_mtime)}</LastModified>"
            self._xml(200, f'<CopyObjectResult xmlns="{NS}">{result}</CopyObjectResult>', {"ETag": tag})
        else:
            self._reply(200, b"", {"ETag": tag})

    def _read_source(self, source: str) -> bytes:
        name, _, key = source.lstrip("/").partition("/")
        bucket = self.objects.bucket(name)
        try:
            return bucket.path(key).read_bytes()
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            raise S3Error(404, "NoSuchKey", f"no object {key[:80]!r} to copy") from None

    def _get(self, bucket: Bucket, key: str, head: bool) -> None:
        try:
            f = bucket.path(key).open("rb")
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            raise S3Error(404, "NoSuchKey", f"no object {key[:80]!r}") from None
        with f:
            stat = os.fstat(f.fileno())
            if self._preconditions(stat, write=False):
                return
            start, end = self._range(stat.st_size)
            headers = {"ETag": etag_of(stat), "Last-Modified": formatdate(stat.st_mtime, usegmt=True),
                       "Content-Type": "application/octet-stream", "Accept-Ranges": "bytes"}  # fmt: skip
            status = 200
            if (start, end) != (0, stat.st_size):
                status = 206
                headers["Content-Range"] = f"bytes {start}-{end - 1}/{stat.st_size}"
            f.seek(start)
            data = b"" if head else f.read(end - start)
        self._reply(status, data, headers, length=end - start)

    def _range(self, size: int) -> tuple[int, int]:
        """[start, end) of the `Range` header (the whole object without one)."""
        header = self.headers.get("Range", "")
        if not header:
            return 0, size
        unit, _, spec = header.partition("=")
        first, _, last = spec.partition("-")
        try:
            if unit.strip() != "bytes" or "," in spec:
                raise ValueError
            if not first:
                start, end = max(0, size - int(last)), size
            else:
                start, end = int(first), min(size, int(last) + 1) if last else size
        except ValueError:
            raise S3Error(400, "InvalidArgument", f"Range: {header[:80]!r} is not one bytes range") from None
        if start >= end:
            raise S3Error(416, "InvalidRange", f"Range {header[:80]!r} of a {size}-byte object")
        return start, end

    def _preconditions(self, stat: os.stat_result | None, write: bool) -> bool:
        """Raise 412 (or, for a read's If-None-Match, reply 304 and return True) when a precondition fails."""
        tag = etag_of(stat) if stat is not None else None
        if_match, if_none = self.headers.get("If-Match"), self.headers.get("If-None-Match")
        if if_match is not None and (tag is None or (if_match.strip() != "*" and tag not in _tags(if_match))):
            raise S3Error(412, "PreconditionFailed", "If-Match: the object is missing or has changed")
        if if_none is not None and tag is not None and (if_none.strip() == "*" or tag in _tags(if_none)):
            if write:
                raise S3Error(412, "PreconditionFailed", "If-None-Match: the object exists")
            self._reply(304, b"", {"ETag": tag})
            return True
        if tag is None and not write:
            raise S3Error(404, "NoSuchKey", "no such object")
        return False

    # --- replies ---------------------------------------------------------------------------

    def _unsupported(self, method: str) -> None:
        log.warning("object store: %s %s is not supported", method, self.path[:200])
        self._error(S3Error(501, "NotImplemented", f"{method} {self.path[:200]} is not supported here"))

    def _error(self, e: S3Error) -> None:
        body = f"<Error><Code>{e.code}</Code><Message>{escape(e.message)}</Message></Error>"
        self._xml(e.status, body)

    def _xml(self, status: int, body: str, headers: dict[str, str] | None = None) -> None:
        data = ('<?xml version="1.0" encoding="UTF-8"?>' + body).encode()
        self._reply(status, data, {"Content-Type": "application/xml", **(headers or {})})

    def _reply(
        self, status: int, data: bytes, headers: dict[str, str] | None = None, length: int | None = None
    ) -> None:
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(data) if length is None else length))
        self.end_headers()
        if data and self.command != "HEAD":
            self.wfile.write(data)


def _tags(header: str) -> set[str]:
    return {t.strip().removeprefix("W/") for t in header.split(",")}


def _iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
