"""The embedded broker's object store over plain HTTP: S3's answers, conditional writes, hostile keys, durability."""

from __future__ import annotations

import http.client
import stat
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from xml.etree import ElementTree

import pytest

from services.bus.objectstore import MAX_BODY, ObjectStore

NS = "{http://s3.amazonaws.com/doc/2006-03-01/}"
LONG_KEY = "/bk1/" + "k" * 1100


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ObjectStore]:
    with ObjectStore(tmp_path_factory.mktemp("objects")) as running:
        assert call(running, "PUT", "/bk1")[0] == 200
        yield running


def call(
    store: ObjectStore, method: str, path: str, body: bytes = b"", headers: dict[str, str] | None = None
) -> tuple[int, bytes, dict[str, str]]:
    connection = http.client.HTTPConnection(store.host, store.port, timeout=10)
    try:
        connection.request(method, path, body=body, headers=headers or {})
        reply = connection.getresponse()
        return reply.status, reply.read(), {k.lower(): v for k, v in reply.getheaders()}
    finally:
        connection.close()


def test_put_get_head_delete_round_trip(store: ObjectStore) -> None:
    status, _, headers = call(store, "PUT", "/bk1/topics/t/0/records/00000001.batch", "批次".encode())
    assert status == 200 and headers["etag"].startswith('"')
    status, body, got = call(store, "GET", "/bk1/topics/t/0/records/00000001.batch")
    assert (status, body.decode(), got["etag"]) == (200, "批次", headers["etag"])
    status, body, got = call(store, "HEAD", "/bk1/topics/t/0/records/00000001.batch")
    assert (status, body, got["content-length"]) == (200, b"", str(len("批次".encode())))
    assert call(store, "DELETE", "/bk1/topics/t/0/records/00000001.batch")[0] == 204
    status, body, _ = call(store, "GET", "/bk1/topics/t/0/records/00000001.batch")
    assert status == 404 and b"<Code>NoSuchKey</Code>" in body


def test_conditional_writes_decide_one_winner(store: ObjectStore) -> None:
    create = {"If-None-Match": "*"}
    assert call(store, "PUT", "/bk1/meta.json", b"v1", create)[0] == 200
    status, body, _ = call(store, "PUT", "/bk1/meta.json", b"other", create)
    assert status == 412 and b"PreconditionFailed" in body
    tag = call(store, "HEAD", "/bk1/meta.json")[2]["etag"]
    assert call(store, "PUT", "/bk1/meta.json", b"v2", {"If-Match": tag})[0] == 200
    assert call(store, "PUT", "/bk1/meta.json", b"v3", {"If-Match": tag})[0] == 412  # the tag went stale with v2
    assert call(store, "PUT", "/bk1/missing.json", b"x", {"If-Match": tag})[0] == 412
    assert call(store, "GET", "/bk1/meta.json")[1] == b"v2"
    current = call(store, "HEAD", "/bk1/meta.json")[2]["etag"]
    assert call(store, "GET", "/bk1/meta.json", headers={"If-None-Match": current})[0] == 304


def test_ranges(store: ObjectStore) -> None:
    call(store, "PUT", "/bk1/range", b"0123456789")
    status, body, headers = call(store, "GET", "/bk1/range", headers={"Range": "bytes=2-4"})
    assert (status, body, headers["content-range"]) == (206, b"234", "bytes 2-4/10")
    assert call(store, "GET", "/bk1/range", headers={"Range": "bytes=7-"})[1] == b"789"
    assert call(store, "GET", "/bk1/range", headers={"Range": "bytes=-2"})[1] == b"89"
    assert call(store, "GET", "/bk1/range", headers={"Range": "bytes=20-30"})[0] == 416
    assert call(store, "GET", "/bk1/range", headers={"Range": "lines=1-2"})[0] == 400


def test_listing_with_delimiter_and_pages(store: ObjectStore) -> None:
    assert call(store, "PUT", "/bk2")[0] == 200
    keys = [f"c/t/p{p}/r{r:02d}" for p in range(3) for r in range(4)] + ["c/meta.json"]
    for key in keys:
        call(store, "PUT", f"/bk2/{key}", key.encode())
    status, body, _ = call(store, "GET", "/bk2?list-type=2&prefix=c%2F&delimiter=%2F")
    root = ElementTree.fromstring(body)
    assert status == 200
    assert [e.text for e in root.iter(f"{NS}Key")] == ["c/meta.json"]
    assert [e.text for e in root.iter(f"{NS}Prefix") if e.text != "c/"] == ["c/t/"]
    seen: list[str] = []
    token = ""
    while True:
        query = "list-type=2&prefix=c%2Ft%2F&max-keys=5" + (
            f"&continuation-token={urllib.parse.quote(token)}" if token else ""
        )
        page = ElementTree.fromstring(call(store, "GET", f"/bk2?{query}")[1])
        seen += [e.text or "" for e in page.iter(f"{NS}Key")]
        token = page.findtext(f"{NS}NextContinuationToken") or ""
        if page.findtext(f"{NS}IsTruncated") == "false":
            break
    assert seen == sorted(k for k in keys if k.startswith("c/t/"))


def test_copy_and_multi_delete(store: ObjectStore) -> None:
    call(store, "PUT", "/bk1/copy/src", b"payload")
    assert call(store, "PUT", "/bk1/copy/dst", headers={"x-amz-copy-source": "/bk1/copy/src"})[0] == 200
    assert call(store, "GET", "/bk1/copy/dst")[1] == b"payload"
    delete = b"<Delete><Object><Key>copy/src</Key></Object><Object><Key>copy/dst</Key></Object></Delete>"
    status, body, _ = call(store, "POST", "/bk1?delete", delete)
    assert status == 200 and body.count(b"<Deleted>") == 2
    assert call(store, "GET", "/bk1/copy/dst")[0] == 404
    assert call(store, "POST", "/bk1?delete", b"<Delete><unclosed")[0] == 400


@pytest.mark.parametrize(
    "path",
    ["/bk1/../../etc/passwd", "/bk1/a/%2e%2e/%2e%2e/x", "/bk1/a//b", "/bk1/a/./b", "/bk1/a%00b", LONG_KEY],
)
def test_hostile_keys_are_refused_and_stay_inside(store: ObjectStore, path: str) -> None:
    status, body, _ = call(store, "PUT", path, b"x")
    assert status == 400 and b"<Code>InvalidArgument</Code>" in body
    assert not any(p.name == "passwd" for p in store.root.rglob("*"))


def test_bad_requests_get_s3_errors_and_the_server_keeps_serving(store: ObjectStore) -> None:
    assert call(store, "GET", "/NO_SUCH?list-type=2")[0] == 400  # an invalid bucket name
    assert call(store, "GET", "/nosuch?list-type=2")[0] == 404
    assert call(store, "GET", "/bk1?list-type=2&max-keys=" + "9" * 5000)[0] in (200, 400)
    assert call(store, "GET", "/bk1?list-type=2&max-keys=many")[0] == 400
    status, body, _ = call(store, "POST", "/bk1/key?uploads")
    assert status == 501 and b"NotImplemented" in body
    status, _, _ = call(store, "PUT", "/bk1/huge", headers={"Content-Length": str(MAX_BODY + 1)})
    assert status == 413
    assert call(store, "PUT", "/bk1/after", b"still serving")[0] == 200


def test_files_are_private_and_a_crash_leaves_no_staged_write(tmp_path: Path) -> None:
    root = tmp_path / "objects"
    with ObjectStore(root) as store:
        call(store, "PUT", "/bk1")
        call(store, "PUT", "/bk1/a/b", b"x")
    for path in [root, *root.rglob("*")]:
        mode = stat.S_IMODE(path.stat().st_mode)
        assert mode & 0o077 == 0, f"{path} is {oct(mode)}"
    (root / "staging" / "cut-off.part").write_bytes(b"half")  # a write whose process died before the rename
    with ObjectStore(root) as store:
        assert call(store, "GET", "/bk1/a/b")[1] == b"x"
    assert not list((root / "staging").iterdir())
