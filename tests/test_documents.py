"""Document intake: direct upload against the sandbox, extraction event to DuckDB, sync."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from pipelines.config import ApiSettings
from pipelines.document_intake import DocumentsClient, UploadFailed, sync_documents
from pipelines.warehouse import reading
from pipelines.webhooks.apply import apply_inbox
from tests.conftest import REPO
from tests.test_webhooks import Receiver


def small_pdf(text: str) -> bytes:
    stream = f"BT /F1 11 Tf 72 720 Td ({text}) Tj ET".encode()
    return (
        b"%PDF-1.4\n1 0 obj << /Type /Catalog /Pages 2 0 R >> endobj\n"
        b"2 0 obj << /Type /Pages /Kids [3 0 R] /Count 1 >> endobj\n"
        b"3 0 obj << /Type /Page /Parent 2 0 R /Contents 4 0 R >> endobj\n"
        b"4 0 obj << /Length "
        + str(len(stream)).encode()
        + b" >> stream\n"
        + stream
        + b"\nendstream endobj\ntrailer << /Root 1 0 R >>\n%%EOF\n"
    )


@pytest.fixture(scope="module")
def sandbox() -> Iterator[Any]:
    from sandbox.thread import SandboxThread

    with SandboxThread(containers=50, webhook_backoff=0.2, document_delay=0) as sb:
        yield sb


def cli(args: list[str], sb: Any) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TERMINAL49_API_KEY": sb.api_key, "TERMINAL49_BASE_URL": sb.base_url}
    return subprocess.run(
        [sys.executable, "-m", "freetime_cli.main", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_upload_then_extracted_event_lands_in_documents(sandbox: Any, tmp_path: Path) -> None:
    duckdb_path, inbox_path = tmp_path / "w.duckdb", tmp_path / "inbox.sqlite"
    pdf = tmp_path / "invoice-INV-40411.pdf"
    pdf.write_bytes(small_pdf("Commercial Invoice INV-40411 total 1200.00 USD"))
    with Receiver("placeholder", inbox_path) as rx:
        hook = sandbox.register_webhook(
            rx.url, events=["document.extracted", "document.extraction_failed"]
        )
        # the receiver must check with the secret the sandbox generated
        rx.server.should_exit = True
    rx2 = Receiver(hook["attributes"]["secret"], inbox_path)
    rx2.sock.close()
    import socket

    port = int(rx.url.split(":")[2].split("/")[0])
    rx2.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    rx2.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    rx2.sock.bind(("127.0.0.1", port))
    import threading

    rx2.thread = threading.Thread(
        target=rx2.server.run, kwargs={"sockets": [rx2.sock]}, daemon=True
    )
    try:
        with rx2:
            done = cli(["documents", "upload", str(pdf), "--name", "April invoice"], sandbox)
            assert done.returncode == 0, done.stderr
            doc_id = done.stdout.split("document ")[1].split()[0]
            sandbox.process_documents([doc_id])
            assert sandbox.deliver_pending(timeout=30)["settled"]
            dup = cli(["documents", "upload", str(pdf)], sandbox)
    finally:
        sandbox.delete_webhook(hook["id"])
    assert dup.returncode == 1
    assert f"duplicate of existing document {doc_id}" in dup.stderr
    summary = apply_inbox(duckdb_path, inbox_path)
    assert summary.events.get("document.extracted") == 1
    with reading(duckdb_path) as con:
        got = con.execute(
            "select d.name, d.document_type, d.file_size_bytes, r.payload is not null "
            "from terminal49.documents d join terminal49.document_representations r "
            "on r.document_id = d.id where d.id = ?",
            [doc_id],
        ).fetchall()
    assert got == [("April invoice", "commercial_invoice", pdf.stat().st_size, True)]


def test_checksum_mismatch_is_a_clear_error(sandbox: Any) -> None:
    api = ApiSettings.resolve(base_url=sandbox.base_url, api_key=sandbox.api_key)
    with DocumentsClient(api) as client, pytest.raises(UploadFailed, match="checksum mismatch"):
        client.upload_bytes(small_pdf("x"), "x.pdf", "x", checksum="AAAAAAAAAAAAAAAAAAAAAA==")


def test_missing_file_fails_before_any_request(sandbox: Any, tmp_path: Path) -> None:
    (tmp_path / "there.pdf").write_bytes(small_pdf("fine"))
    before = sandbox.stats()
    done = cli(
        ["documents", "upload", str(tmp_path / "there.pdf"), str(tmp_path / "nope.pdf")], sandbox
    )
    assert done.returncode == 2
    assert "no such file" in done.stderr and "Traceback" not in done.stderr
    assert sandbox.stats().get("requests") == before.get("requests")


@pytest.mark.fast
def test_storage_put_never_carries_the_key() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if request.url.path.endswith("/direct_uploads"):
            return httpx.Response(
                200,
                json={
                    "signed_id": "sid",
                    "direct_upload": {
                        "url": "https://storage.example/put/k?token=t",
                        "headers": {
                            "Content-Type": "application/pdf",
                            "Content-MD5": "m",
                            "Content-Disposition": "inline",
                        },
                    },
                },
            )
        if request.method == "PUT":
            return httpx.Response(200)
        return httpx.Response(201, json={"data": {"id": "doc-1", "type": "document"}})

    api = ApiSettings(base_url="https://api.example/v2", api_key="secret-key")
    with DocumentsClient(api, transport=httpx.MockTransport(handler)) as client:
        result = client.upload_bytes(b"%PDF-1.4 hello", "a.pdf", "A")
    assert result.document_id == "doc-1"
    put = next(r for r in seen if r.method == "PUT")
    assert "authorization" not in put.headers
    assert put.headers["content-length"] == "14"
    assert put.headers["content-md5"] == "m" and put.headers["content-disposition"] == "inline"
    assert all("secret-key" not in str(r.url) for r in seen)
    assert "secret-key" not in repr(client)


def test_documents_sync_loads_the_seeded_email_documents(sandbox: Any, tmp_path: Path) -> None:
    api = ApiSettings.resolve(
        base_url=sandbox.base_url, api_key=sandbox.api_key, rate_limit_per_minute=100_000
    )
    counts = sync_documents(tmp_path / "w.duckdb", api)
    truth = sandbox.documents_truth()
    assert counts["documents"] >= 1 and counts["email_submissions"] >= 1
    with reading(tmp_path / "w.duckdb") as con:
        n_docs = con.execute("select count(distinct id) from terminal49.documents").fetchall()
    assert n_docs[0][0] == len(truth["documents"])


class _ReorderingDocuments:
    """A documents list, newest update first, two per page, where ``d5`` is updated (and so
    jumps to page 1) just before page 2 is first served: an offset scan never sees it."""

    def __init__(self, extra_total: int = 0) -> None:
        self.order = [f"d{i}" for i in range(1, 6)]
        self.extra_total = extra_total  # a total above what the list holds: never complete
        self.requests: list[str] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        number = int(request.url.params.get("page[number]", "1"))
        self.requests.append(f"{request.url.path}#{number}")
        if request.url.path.endswith("/email_submissions"):
            return httpx.Response(200, json={"data": [], "meta": {"total": 0}, "links": {}})
        if number == 2 and self.order[0] != "d5":
            self.order.remove("d5")
            self.order.insert(0, "d5")
        page = self.order[(number - 1) * 2 : number * 2]
        more = number * 2 < len(self.order)
        return httpx.Response(
            200,
            json={
                "data": [{"id": i, "type": "document", "attributes": {"name": i}} for i in page],
                "meta": {"size": 2, "total": len(self.order) + self.extra_total},
                "links": {"next": f"/v2/documents?page[number]={number + 1}"} if more else {},
            },
        )


@pytest.mark.fast
def test_documents_sync_finds_a_document_that_moved_during_the_scan(tmp_path: Path) -> None:
    from pipelines.load import LoadFailed

    api = ApiSettings(base_url="http://api.test/v2", api_key="k", rate_limit_per_minute=None)
    server = _ReorderingDocuments()
    sync_documents(tmp_path / "w.duckdb", api, transport=httpx.MockTransport(server))
    with reading(tmp_path / "w.duckdb") as con:
        ids = [r[0] for r in con.execute("select id from terminal49.documents").fetchall()]
    assert sorted(ids) == [f"d{i}" for i in range(1, 6)], server.requests  # each once
    # one reconciliation page (page 1 again), then complete
    assert [r for r in server.requests if "documents#" in r] == [
        "/v2/documents#1",
        "/v2/documents#2",
        "/v2/documents#3",
        "/v2/documents#1",
    ]

    lying = _ReorderingDocuments(extra_total=1)
    with pytest.raises(LoadFailed, match=r"/documents: saw 5 distinct records of the 6"):
        sync_documents(tmp_path / "x.duckdb", api, transport=httpx.MockTransport(lying))
