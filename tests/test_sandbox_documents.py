"""Sandbox document intake over real HTTP: direct upload and storage checks, document creation,
duplicates, extraction events with representations, downloads, email submissions, schemas.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from conftest import T49

from sandbox.document_store import fake_pdf
from sandbox.receiver import WebhookReceiver
from sandbox.thread import SandboxThread

pytestmark = pytest.mark.sandbox

EXAMPLE = json.loads((T49 / "webhooks" / "document.extracted.json").read_text())


@pytest.fixture(scope="module")
def rx() -> Iterator[WebhookReceiver]:
    with WebhookReceiver() as r:
        yield r


@pytest.fixture(scope="module")
def sb(rx: WebhookReceiver) -> Iterator[SandboxThread]:
    with SandboxThread(
        containers=200, seed=21, clock="2026-11-20T12:00:00Z", document_delay=0, emails_per_day=0
    ) as proc:
        proc.register_webhook(
            rx.url("/docs"), events=["document.extracted", "document.extraction_failed"]
        )
        yield proc


def md5(data: bytes) -> str:
    return base64.b64encode(hashlib.md5(data).digest()).decode()  # noqa: S324


def blob_request(sb: SandboxThread, data: bytes, **over: Any) -> httpx.Response:
    blob = {
        "filename": "invoice.pdf",
        "content_type": "application/pdf",
        "byte_size": len(data),
        "checksum": md5(data),
        **over,
    }
    return sb.client.post(f"{sb.base_url}/rails/active_storage/direct_uploads", json={"blob": blob})


def test_direct_upload_happy_path_and_download(sb: SandboxThread) -> None:
    data = fake_pdf(["Commercial Invoice", "INV-77123", "happy path"])
    r = blob_request(sb, data)
    assert r.status_code == 200
    blob = r.json()
    assert {
        "id",
        "key",
        "filename",
        "content_type",
        "metadata",
        "service_name",
        "byte_size",
        "checksum",
        "created_at",
        "signed_id",
        "direct_upload",
    } <= set(blob)
    up = blob["direct_upload"]
    assert "/v2/" not in up["url"] and "/storage/" in up["url"]
    assert set(up["headers"]) == {"Content-Type", "Content-MD5", "Content-Disposition"}
    put = httpx.put(up["url"], content=data, headers=up["headers"])  # no API key
    assert put.status_code == 200
    created = sb.client.post(
        f"{sb.base_url}/documents",
        json={
            "data": {
                "type": "document",
                "attributes": {"name": "Invoice 77123", "attached_document": blob["signed_id"]},
            }
        },
    )
    assert created.status_code == 201
    doc = created.json()["data"]
    assert doc["type"] == "document"
    attrs = doc["attributes"]
    assert attrs["document_type"] is None and attrs["source"] == "api"
    assert attrs["file_name"] == "invoice.pdf" and attrs["file_size_bytes"] == len(data)
    assert {
        "name",
        "document_type_manual",
        "classification_notes",
        "file_content_type",
        "created_at",
        "updated_at",
    } <= set(attrs)
    assert doc["links"]["download"] == f"/documents/{doc['id']}/download_url"
    url = sb.client.get(f"{sb.base_url}/documents/{doc['id']}/download_url").json()
    got = httpx.get(url["download_url"])
    assert got.status_code == 200 and got.content == data
    assert httpx.get(url["download_url"].replace("token=", "token=x")).status_code == 403
    dup = sb.upload_document(data, filename="copy.pdf", name="Copy")
    assert dup.status_code == 409
    err = dup.json()["errors"][0]
    assert err["code"] == "duplicate_document"
    assert err["meta"]["existing_document_id"] == doc["id"]


def test_blob_validation(sb: SandboxThread) -> None:
    data = b"%PDF-1.4 x"
    for over, pointer in (
        ({"byte_size": 0}, "/blob/byte_size"),
        ({"byte_size": "10"}, "/blob/byte_size"),
        ({"checksum": "not-base64!"}, "/blob/checksum"),
        ({"checksum": base64.b64encode(b"short").decode()}, "/blob/checksum"),
        ({"filename": ""}, "/blob/filename"),
        ({"content_type": "pdf"}, "/blob/content_type"),
    ):
        r = blob_request(sb, data, **over)
        assert r.status_code == 422, over
        assert r.json()["errors"][0]["source"]["pointer"] == pointer


def test_storage_rejects_checksum_and_length_mismatch(sb: SandboxThread) -> None:
    data = fake_pdf(["mismatch test"])
    up = blob_request(sb, data).json()["direct_upload"]
    other = data[:-1] + b"X"
    r = httpx.put(up["url"], content=other, headers={**up["headers"]})
    assert r.status_code == 400 and "BadDigest" in r.text
    r = httpx.put(up["url"], content=data + b"more", headers=up["headers"])
    assert r.status_code == 400 and "does not match" in r.text
    r = httpx.put(up["url"], content=data[:-5], headers=up["headers"])
    assert r.status_code == 400 and "IncompleteBody" in r.text
    r = httpx.put(up["url"].replace("token=", "token=0"), content=data, headers=up["headers"])
    assert r.status_code == 403


def test_attached_document_must_be_signed_id(sb: SandboxThread) -> None:
    data = fake_pdf(["signed id test"])
    blob = blob_request(sb, data).json()
    assert (
        httpx.put(
            blob["direct_upload"]["url"], content=data, headers=blob["direct_upload"]["headers"]
        ).status_code
        == 200
    )
    for att in (blob["direct_upload"]["url"], "bogus--deadbeef"):
        r = sb.client.post(
            f"{sb.base_url}/documents",
            json={
                "data": {"type": "document", "attributes": {"name": "x", "attached_document": att}}
            },
        )
        assert r.status_code == 422
        assert r.json()["errors"][0]["source"]["pointer"] == "/data/attributes/attached_document"


def test_extraction_events(sb: SandboxThread, rx: WebhookReceiver) -> None:
    ok = sb.upload_document(fake_pdf(["Commercial Invoice", "INV-55501"]), "inv-55501.pdf")
    bad = sb.upload_document(b"just some text, not a pdf at all " * 4, "notes.txt", "text/plain")
    assert ok.status_code == bad.status_code == 201
    ok_id, bad_id = ok.json()["data"]["id"], bad.json()["data"]["id"]
    done = sb.process_documents()
    assert {ok_id, bad_id} <= set(done["processed"]) and done["pending"] == 0
    assert sb.deliver_pending(timeout=20)["settled"]
    bodies = [json.loads(r.body) for r in rx.requests if r.path == "/docs"]
    by_doc = {b["data"]["relationships"]["document"]["data"]["id"]: b for b in bodies}
    ext = by_doc[ok_id]
    assert ext["data"]["attributes"]["event"] == "document.extracted"
    assert set(ext) == set(EXAMPLE)
    assert set(ext["data"]["attributes"]) == set(EXAMPLE["data"]["attributes"])
    assert set(ext["data"]["relationships"]) == set(EXAMPLE["data"]["relationships"])
    inc = {r["type"]: r for r in ext["included"]}
    assert inc["document"]["attributes"]["document_type"] == "commercial_invoice"
    assert set(EXAMPLE["included"][0]["attributes"]) <= set(inc["document"]["attributes"])
    rep = inc["document_representation"]
    assert rep["attributes"]["schema_version"] == "2026-03-23"
    assert rep["attributes"]["payload"]["invoice_number"] == "INV-55501"
    assert (
        inc["document"]["relationships"]["last_document_representation"]["data"]["id"] == rep["id"]
    )
    fail = by_doc[bad_id]
    assert fail["data"]["attributes"]["event"] == "document.extraction_failed"
    got = sb.client.get(
        f"{sb.base_url}/documents/{ok_id}", params={"include": "last_document_representation"}
    ).json()
    assert got["data"]["attributes"]["document_type"] == "commercial_invoice"
    assert got["included"][0]["type"] == "document_representation"
    schema = sb.client.get(f"{sb.base_url}/document_schemas/commercial_invoice@2026-03-23")
    assert schema.status_code == 200
    payload = schema.json()["data"]["attributes"]["schema_payload"]
    assert set(rep["attributes"]["payload"]) <= set(payload["properties"])
    assert sb.client.get(f"{sb.base_url}/document_schemas/nope@2026-03-23").status_code == 404


def test_email_submissions_and_truth(sb: SandboxThread) -> None:
    c = sb.client
    emails = c.get(f"{sb.base_url}/email_submissions").json()
    assert emails["meta"]["total"] >= 3
    e = emails["data"][0]
    assert {"subject", "from", "to", "cc", "message_id", "sent_at", "documents_count"} <= set(
        e["attributes"]
    )
    assert {r["type"] for r in emails["included"]} == {"document", "document_representation"}
    one = c.get(f"{sb.base_url}/email_submissions/{e['id']}").json()
    assert one["data"]["id"] == e["id"]
    docs = c.get(
        f"{sb.base_url}/documents", params={"include": "email_submission", "page[size]": 100}
    ).json()
    sources = {d["attributes"]["source"] for d in docs["data"]}
    assert "email" in sources
    assert any(r["type"] == "email_submission" for r in docs["included"])
    truth = sb.documents_truth()
    assert len(truth["documents"]) == docs["meta"]["total"]
    assert {"documents", "email_submissions", "document_representations"} <= set(truth)
    assert c.get(f"{sb.base_url}/documents/nope").status_code == 404
