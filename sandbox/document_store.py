"""Document intake of the sandbox: direct-upload blobs, storage, documents, email submissions.

Flow (as Terminal49's, ActiveStorage direct upload):

1. ``POST /v2/rails/active_storage/direct_uploads`` with ``{"blob": {filename, content_type,
   byte_size, checksum}}`` -> :meth:`DocumentStore.create_blob` validates the fields and returns
   a blob whose ``direct_upload.url`` is a storage URL outside ``/v2`` (``/storage/upload/KEY
   ?token=...``, authorised by its HMAC path token, no API key).
2. ``PUT`` of the bytes there -> :meth:`DocumentStore.put` rejects a length or MD5 mismatch.
3. ``POST /v2/documents`` with ``attached_document`` = the blob's ``signed_id`` ->
   :meth:`DocumentStore.create_document` (duplicate content: :class:`DuplicateDocument`).
4. Classification and extraction run later (:meth:`DocumentStore.process`) and produce
   ``document.extracted`` (with a ``document_representation``) or
   ``document.extraction_failed`` occurrences for the webhook hub.

Email submissions: the synthetic account starts with a few seeded emails whose attachments are
already extracted; each advance of the clock may bring new ones (seeded), processed with the
other pending documents.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import random
import re
from dataclasses import dataclass, field
from typing import Any

from sandbox.model import Account, derive_uuid
from sandbox.render import Renderer, iso
from sandbox.webhook_events import Occurrence
from sandbox.world import DAY, HOUR

Resource = dict[str, Any]

SCHEMA_VERSION = "2026-03-23"
SERVICE_NAME = "sandbox_s3"
DOCS_ALIAS = "docs+sandbox@terminal49.com"
MIN_BYTES = 64  # smaller files fail extraction ("empty or unreadable")

_SCHEMA_FIELDS: dict[str, dict[str, tuple[str, str]]] = {
    "commercial_invoice": {
        "invoice_number": ("string", "Invoice number"),
        "invoice_date": ("string", "Invoice date (YYYY-MM-DD)"),
        "supplier_name": ("string", "Seller / supplier"),
        "buyer_name": ("string", "Buyer / consignee"),
        "total_amount": ("string", "Invoice total, decimal string"),
        "currency": ("string", "ISO 4217 currency"),
        "incoterms": ("string", "Incoterms rule"),
        "bill_of_lading_number": ("string", "Bill of lading referenced"),
        "container_numbers": ("array", "Container numbers referenced"),
    },
    "bill_of_lading": {
        "bill_of_lading_number": ("string", "Bill of lading number"),
        "shipping_line_scac": ("string", "Carrier SCAC"),
        "vessel_name": ("string", "Vessel"),
        "voyage_number": ("string", "Voyage"),
        "port_of_lading": ("string", "Port of lading UN/LOCODE"),
        "port_of_discharge": ("string", "Port of discharge UN/LOCODE"),
        "shipper_name": ("string", "Shipper"),
        "consignee_name": ("string", "Consignee"),
        "container_numbers": ("array", "Container numbers"),
    },
    "packing_list": {
        "packing_list_number": ("string", "Packing list number"),
        "total_packages": ("integer", "Number of packages"),
        "gross_weight_kg": ("string", "Gross weight in kg"),
        "bill_of_lading_number": ("string", "Bill of lading referenced"),
        "container_numbers": ("array", "Container numbers"),
    },
    "arrival_notice": {
        "bill_of_lading_number": ("string", "Bill of lading number"),
        "eta": ("string", "Estimated arrival (YYYY-MM-DD)"),
        "port_of_discharge": ("string", "Port of discharge UN/LOCODE"),
        "freight_amount_due": ("string", "Freight due, decimal string"),
        "container_numbers": ("array", "Container numbers"),
    },
}
DOCUMENT_TYPES = tuple(_SCHEMA_FIELDS)
_LABELS = {
    "commercial_invoice": "Commercial Invoice",
    "bill_of_lading": "Bill of Lading",
    "packing_list": "Packing List",
    "arrival_notice": "Arrival Notice",
}
_KEYWORDS: tuple[tuple[str, str], ...] = (
    ("packing list", "packing_list"),
    ("arrival notice", "arrival_notice"),
    ("bill of lading", "bill_of_lading"),
    ("invoice", "commercial_invoice"),
    ("b/l", "bill_of_lading"),
    ("bol", "bill_of_lading"),
    ("packing", "packing_list"),
    ("arrival", "arrival_notice"),
)
_SUPPLIERS = (
    "Acme Manufacturing Ltd",
    "Shenzhen Brightway Electronics Co",
    "Ningbo Homeware Co",
    "Saigon Textile JSC",
    "Busan Precision Parts",
    "Guangzhou Furniture Works",
)
_BL_RE = re.compile(rb"\b([A-Z]{4}\d{10})\b")
_CNTR_RE = re.compile(rb"\b([A-Z]{4}\d{7})\b")
_INV_RE = re.compile(rb"\b(INV-\d{3,8})\b")


class UploadError(Exception):
    """A 422 with a JSON:API ``source.pointer``."""

    def __init__(self, pointer: str, detail: str, title: str = "Unprocessable Entity") -> None:
        super().__init__(detail)
        self.pointer = pointer
        self.detail = detail
        self.title = title


class StorageError(Exception):
    """A rejected storage PUT (S3-like ``code``: BadDigest, IncompleteBody, ...)."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message


class DuplicateDocument(Exception):
    """``POST /documents`` with content already submitted."""

    def __init__(self, existing_id: str, existing_name: str) -> None:
        super().__init__(existing_id)
        self.existing_id = existing_id
        self.existing_name = existing_name


@dataclass
class Blob:
    """A direct-upload blob and, once PUT, its bytes."""

    num: int
    id: str
    key: str
    filename: str
    content_type: str
    byte_size: int
    checksum: str
    created_at: str
    data: bytes | None = None


@dataclass
class Email:
    """An inbound email to the docs alias."""

    id: str
    subject: str
    body: str
    sender: str
    message_id: str
    sent_at: str
    created_at: str
    documents: list[str] = field(default_factory=list)


@dataclass
class Representation:
    """An extraction result."""

    id: str
    schema_version: str
    payload: dict[str, Any]
    created_at: str


@dataclass
class Document:
    """A submitted document (``state``: processing, extracted or failed)."""

    id: str
    name: str
    source: str
    blob: Blob
    created_at: str
    updated_at: str
    user_id: str | None
    email_id: str | None = None
    document_type: str | None = None
    classification_notes: str | None = None
    representation: Representation | None = None
    state: str = "processing"
    shipments: list[str] = field(default_factory=list)
    containers: list[str] = field(default_factory=list)


def md5_b64(data: bytes) -> str:
    """Base64 of the binary MD5 digest (the blob ``checksum``)."""
    return base64.b64encode(hashlib.md5(data).digest()).decode()  # noqa: S324 - not security


def fake_pdf(lines: list[str]) -> bytes:
    """A small PDF-looking file whose text holds ``lines`` (enough for the sandbox's sniffing)."""
    text = "\n".join(f"({line}) Tj T*" for line in lines)
    stream = f"BT /F1 11 Tf 72 720 Td 14 TL\n{text}\nET".encode()
    return (
        b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n1 0 obj << /Type /Catalog /Pages 2 0 R >> endobj\n"
        b"2 0 obj << /Type /Pages /Kids [3 0 R] /Count 1 >> endobj\n"
        b"3 0 obj << /Type /Page /Parent 2 0 R /Contents 4 0 R >> endobj\n"
        b"4 0 obj << /Length "
        + str(len(stream)).encode()
        + b" >> stream\n"
        + stream
        + b"\nendstream endobj\ntrailer << /Root 1 0 R >>\n%%EOF\n"
    )


def sniff(data: bytes) -> str | None:
    """``pdf``, ``png``, ``jpeg``, ``tiff`` or None."""
    if data.startswith(b"%PDF-"):
        return "pdf"
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "png"
    if data.startswith(b"\xff\xd8\xff"):
        return "jpeg"
    if data.startswith((b"II*\x00", b"MM\x00*")):
        return "tiff"
    return None


def schema_resource(doc_type: str) -> Resource:
    """The ``document_schema`` resource ``{doc_type}@{SCHEMA_VERSION}``."""
    fields = _SCHEMA_FIELDS[doc_type]
    props: dict[str, Any] = {}
    for name, (typ, desc) in fields.items():
        props[name] = (
            {"type": "array", "items": {"type": "string"}, "description": desc}
            if typ == "array"
            else {"type": [typ, "null"], "description": desc}
        )
    full = f"{doc_type}@{SCHEMA_VERSION}"
    return {
        "id": full,
        "type": "document_schema",
        "attributes": {
            "document_type": doc_type,
            "label": _LABELS[doc_type],
            "schema_version": SCHEMA_VERSION,
            "full_version": full,
            "current": True,
            "draft": False,
            "active_at": "2026-03-23T00:00:00Z",
            "schema_format": "json_schema",
            "description": f"Fields extracted from a {_LABELS[doc_type].lower()}.",
            "schema_payload": {
                "$schema": "https://json-schema.org/draft/2020-12/schema",
                "title": _LABELS[doc_type],
                "type": "object",
                "properties": props,
                "additionalProperties": False,
            },
            "created_at": "2026-03-23T00:00:00Z",
            "updated_at": "2026-03-23T00:00:00Z",
        },
        "links": {"self": f"/v2/document_schemas/{full}"},
    }


class DocumentStore:
    """Blobs, documents, emails and representations of the account (sandbox clock times)."""

    def __init__(self, account: Account, renderer: Renderer) -> None:
        self.a = account
        self.r = renderer
        self.key = hashlib.sha256(f"sandbox-storage:{account.seed}".encode()).digest()
        self.blobs: dict[str, Blob] = {}
        self.blob_by_key: dict[str, Blob] = {}
        self.documents: dict[str, Document] = {}
        self.emails: dict[str, Email] = {}
        self.by_checksum: dict[str, str] = {}
        self.account_id = derive_uuid(account.seed, "account", 0)
        self.user_id = derive_uuid(account.seed, "user", 0)
        self._n = 0
        self._emails_made = 0
        self._bl_index: list[str] = []
        self._bl_map: dict[str, int] = {}

    # ---- ids and signing --------------------------------------------------------------------
    def _uid(self, kind: str) -> str:
        self._n += 1
        return derive_uuid(self.a.seed, kind, self._n)

    def _mac(self, text: str) -> str:
        return hmac.new(self.key, text.encode(), hashlib.sha256).hexdigest()

    def signed_id(self, blob: Blob) -> str:
        """Rails-like signed id: Base64 JSON message ``--`` HMAC hex."""
        msg = base64.b64encode(
            f'{{"_rails":{{"data":{blob.num},"pur":"blob_id"}}}}'.encode()
        ).decode()
        return f"{msg}--{self._mac(msg)[:40]}"

    def blob_from_signed_id(self, signed: str) -> Blob | None:
        """The blob a valid signed id names, else None."""
        msg, sep, mac = signed.rpartition("--")
        if not sep or not hmac.compare_digest(self._mac(msg)[:40], mac):
            return None
        try:
            num = int(base64.b64decode(msg).decode().split('"data":')[1].split(",")[0])
        except (ValueError, IndexError):
            return None
        return next((b for b in self.blobs.values() if b.num == num), None)

    def upload_token(self, key: str) -> str:
        """Path token of the storage PUT URL of blob ``key``."""
        return self._mac(f"put:{key}")[:32]

    def download_token(self, key: str, expires: int) -> str:
        """Token of a download URL of blob ``key`` valid until ``expires`` (epoch seconds)."""
        return self._mac(f"get:{key}:{expires}")[:32]

    # ---- blobs and storage -----------------------------------------------------------------
    def create_blob(self, body: Any, origin: str) -> Resource:
        """Validate a direct-upload request and create the blob; raises :class:`UploadError`."""
        blob = body.get("blob") if isinstance(body, dict) else None
        if not isinstance(blob, dict):
            raise UploadError("/blob", "blob is required")
        fn = blob.get("filename")
        if not isinstance(fn, str) or not fn.strip():
            raise UploadError("/blob/filename", "filename must be a non-empty string")
        ct = blob.get("content_type")
        if not isinstance(ct, str) or "/" not in ct:
            raise UploadError("/blob/content_type", "content_type must be a MIME type")
        size = blob.get("byte_size")
        if isinstance(size, bool) or not isinstance(size, int) or size <= 0:
            raise UploadError("/blob/byte_size", "byte_size must be an integer greater than 0")
        ck = blob.get("checksum")
        try:
            ok = isinstance(ck, str) and len(base64.b64decode(ck, validate=True)) == 16
        except ValueError:
            ok = False
        if not ok:
            raise UploadError(
                "/blob/checksum", "checksum must be the Base64 of the 16-byte MD5 digest"
            )
        assert isinstance(ck, str)
        self._n += 1
        num = self._n
        bid = derive_uuid(self.a.seed, "blob", num)
        key = hashlib.blake2b(f"{self.a.seed}:{num}".encode(), digest_size=14).hexdigest()
        b = Blob(num, bid, key, fn, ct, size, ck, iso(self.a.clock))
        self.blobs[bid] = b
        self.blob_by_key[key] = b
        return self.blob_resource(b, origin)

    def blob_resource(self, b: Blob, origin: str) -> Resource:
        """The blob as the direct-upload endpoint returns it."""
        return {
            "id": b.id,
            "key": b.key,
            "filename": b.filename,
            "content_type": b.content_type,
            "metadata": {},
            "service_name": SERVICE_NAME,
            "byte_size": b.byte_size,
            "checksum": b.checksum,
            "created_at": b.created_at,
            "signed_id": self.signed_id(b),
            "direct_upload": {
                "url": f"{origin}/storage/upload/{b.key}?token={self.upload_token(b.key)}",
                "headers": {
                    "Content-Type": b.content_type,
                    "Content-MD5": b.checksum,
                    "Content-Disposition": f'inline; filename="{b.filename}"; '
                    f"filename*=UTF-8''{b.filename}",
                },
            },
        }

    def put(self, key: str, token: str, data: bytes, content_md5: str | None) -> None:
        """Store the bytes of blob ``key``; raises :class:`StorageError` like S3 would."""
        b = self.blob_by_key.get(key)
        if b is None or not hmac.compare_digest(self.upload_token(key), token or ""):
            raise StorageError(403, "AccessDenied", "Request has expired or the token is invalid")
        if len(data) != b.byte_size:
            raise StorageError(
                400,
                "IncompleteBody" if len(data) < b.byte_size else "BadRequest",
                f"Content length {len(data)} does not match the blob byte_size {b.byte_size}",
            )
        if content_md5 is not None and content_md5 != b.checksum:
            raise StorageError(
                400, "BadDigest", "The Content-MD5 you specified did not match what was expected"
            )
        if md5_b64(data) != b.checksum:
            raise StorageError(
                400, "BadDigest", "The Content-MD5 you specified did not match what we received"
            )
        b.data = data

    def download_url(self, doc: Document, origin: str) -> str:
        """A presigned GET URL of the document bytes (valid 5 minutes of sandbox time + 1h)."""
        expires = self.a.clock + HOUR
        b = doc.blob
        return (
            f"{origin}/storage/download/{b.key}/{b.filename}?expires={expires}"
            f"&token={self.download_token(b.key, expires)}"
        )

    def get(self, key: str, expires: str, token: str) -> Blob:
        """The blob behind a download URL; raises :class:`StorageError`."""
        b = self.blob_by_key.get(key)
        try:
            exp = int(expires)
        except ValueError:
            exp = -1
        if (
            b is None
            or b.data is None
            or not hmac.compare_digest(self.download_token(key, exp), token or "")
        ):
            raise StorageError(403, "AccessDenied", "Request has expired or the token is invalid")
        return b

    # ---- documents ---------------------------------------------------------------------------
    def create_document(self, body: Any) -> Document:
        """``POST /documents``: raises :class:`UploadError` (422) or :class:`DuplicateDocument`."""
        data = body.get("data") if isinstance(body, dict) else None
        if not isinstance(data, dict) or data.get("type") != "document":
            raise UploadError("/data/type", "data.type must be 'document'")
        attrs = data.get("attributes")
        if not isinstance(attrs, dict):
            raise UploadError("/data/attributes", "attributes are required")
        name = attrs.get("name")
        if not isinstance(name, str) or not name.strip():
            raise UploadError("/data/attributes/name", "name can't be blank")
        att = attrs.get("attached_document")
        if not isinstance(att, str) or not att:
            raise UploadError(
                "/data/attributes/attached_document", "attached_document can't be blank"
            )
        if "://" in att or att.startswith("/") or "/storage/" in att:
            raise UploadError(
                "/data/attributes/attached_document",
                "attached_document must be the signed_id of a direct upload, not a URL",
            )
        blob = self.blob_from_signed_id(att)
        if blob is None:
            raise UploadError(
                "/data/attributes/attached_document",
                "attached_document is not a valid signed blob id",
            )
        if blob.data is None:
            raise UploadError(
                "/data/attributes/attached_document", "the file of this blob has not been uploaded"
            )
        existing = self.by_checksum.get(blob.checksum)
        if existing is not None:
            raise DuplicateDocument(existing, self.documents[existing].name)
        now = iso(self.a.clock)
        doc = Document(self._uid("document"), name, "api", blob, now, now, self.user_id)
        self._add(doc)
        return doc

    def _add(self, doc: Document) -> None:
        self.documents[doc.id] = doc
        self.by_checksum.setdefault(doc.blob.checksum, doc.id)

    def pending(self) -> list[Document]:
        """Documents still processing, oldest first."""
        return [d for d in self.documents.values() if d.state == "processing"]

    def process(self, ids: list[str] | None = None) -> list[Occurrence]:
        """Classify and extract pending documents (all, or ``ids``); one occurrence each."""
        out = []
        for doc in self.pending():
            if ids is not None and doc.id not in ids:
                continue
            out.append(self._extract(doc))
        return out

    def _extract(self, doc: Document) -> Occurrence:
        now = iso(self.a.clock)
        data = doc.blob.data or b""
        kind = sniff(data)
        doc.updated_at = now
        if kind is None or len(data) < MIN_BYTES:
            doc.state = "failed"
            doc.classification_notes = (
                "File is empty or unreadable"
                if len(data) < MIN_BYTES
                else "Unsupported file type: not a PDF or image"
            )
            return self._occurrence(doc, "document.extraction_failed")
        rng = random.Random(f"{self.a.seed}:extract:{doc.id}")
        hay = (doc.name + " " + doc.blob.filename).lower().encode() + b" " + data[:8192].lower()
        doc_type = next((t for k, t in _KEYWORDS if k.encode() in hay), "commercial_invoice")
        doc.document_type = doc_type
        doc.classification_notes = f"Classified as {doc_type} ({kind})"
        payload = self._payload(doc_type, data, rng, doc)
        doc.representation = Representation(
            derive_uuid(self.a.seed, "representation", doc.id), SCHEMA_VERSION, payload, now
        )
        doc.state = "extracted"
        return self._occurrence(doc, "document.extracted")

    def _payload(
        self, doc_type: str, data: bytes, rng: random.Random, doc: Document
    ) -> dict[str, Any]:
        a = self.a
        bl_found = [m.decode() for m in _BL_RE.findall(data)]
        ship: int | None = None
        for bl in bl_found:
            ship = self.shipment_by_bl(bl)
            if ship is not None:
                break
        if ship is None and a.shipment_ids:
            ship = int(rng.random() * len(a.shipment_ids))
        sa = self.r.shipment(ship)["attributes"] if ship is not None else {}
        cntrs = [m.decode() for m in _CNTR_RE.findall(data)]
        if not cntrs and ship is not None:
            first, n = a.shipments.get(ship, "first"), a.shipments.get(ship, "n")
            cntrs = [self.r.container(j)["attributes"]["number"] for j in range(first, first + n)]
        if ship is not None:
            doc.shipments = [a.shipment_ids[ship]]
            first, n = a.shipments.get(ship, "first"), a.shipments.get(ship, "n")
            doc.containers = [a.container_ids[j] for j in range(first, first + n)]
        bl = bl_found[0] if bl_found else sa.get("bill_of_lading_number")
        day = iso(a.clock - int(rng.random() * 20) * DAY)[:10]
        if doc_type == "commercial_invoice":
            inv = _INV_RE.search(data)
            return {
                "invoice_number": inv.group(1).decode()
                if inv
                else f"INV-{int(rng.random() * 90000) + 10000}",
                "invoice_date": day,
                "supplier_name": rng.choice(_SUPPLIERS),
                "buyer_name": sa.get("customer_name"),
                "total_amount": f"{rng.random() * 90000 + 1000:.2f}",
                "currency": "USD",
                "incoterms": rng.choice(("FOB", "CIF", "EXW", "DDP")),
                "bill_of_lading_number": bl,
                "container_numbers": cntrs,
            }
        if doc_type == "bill_of_lading":
            return {
                "bill_of_lading_number": bl,
                "shipping_line_scac": sa.get("shipping_line_scac"),
                "vessel_name": sa.get("pod_vessel_name"),
                "voyage_number": sa.get("pod_voyage_number"),
                "port_of_lading": sa.get("port_of_lading_locode"),
                "port_of_discharge": sa.get("port_of_discharge_locode"),
                "shipper_name": rng.choice(_SUPPLIERS),
                "consignee_name": sa.get("customer_name"),
                "container_numbers": cntrs,
            }
        if doc_type == "packing_list":
            return {
                "packing_list_number": f"PL-{int(rng.random() * 90000) + 10000}",
                "total_packages": int(rng.random() * 900) + 20,
                "gross_weight_kg": f"{rng.random() * 20000 + 2000:.1f}",
                "bill_of_lading_number": bl,
                "container_numbers": cntrs,
            }
        eta = sa.get("pod_eta_at") or sa.get("pod_ata_at") or iso(a.clock)
        return {
            "bill_of_lading_number": bl,
            "eta": eta[:10],
            "port_of_discharge": sa.get("port_of_discharge_locode"),
            "freight_amount_due": f"{rng.random() * 4000:.2f}",
            "container_numbers": cntrs,
        }

    def shipment_by_bl(self, bl: str) -> int | None:
        """Index of the shipment with bill of lading number ``bl`` (index built lazily)."""
        n = len(self.a.shipment_ids)
        if len(self._bl_index) != n:
            for s in range(len(self._bl_index), n):
                self._bl_index.append(self.r.shipment(s)["attributes"]["bill_of_lading_number"])
            self._bl_map = {b: s for s, b in enumerate(self._bl_index)}
        return self._bl_map.get(bl)

    # ---- email -------------------------------------------------------------------------------
    def seed_emails(self, n: int) -> None:
        """Create ``n`` seeded past emails with 1-2 attachments each, already extracted."""
        rng = random.Random(f"{self.a.seed}:emails")
        for _ in range(n):
            when = self.a.clock - int(rng.random() * 30 * DAY) - HOUR
            self._email(rng, when)
        for doc in self.pending():
            self._extract(doc)

    def arrive(self, old: int, new: int, per_day: float) -> int:
        """Seeded new emails with sent times in (old, new]; their documents stay pending."""
        rng = random.Random(f"{self.a.seed}:emails:{old}:{new}")
        expected = per_day * (new - old) / DAY
        n = int(expected) + (1 if rng.random() < expected - int(expected) else 0)
        for _ in range(n):
            self._email(rng, old + 1 + int(rng.random() * (new - old)))
        return n

    def _email(self, rng: random.Random, when: int) -> Email:
        a = self.a
        self._emails_made += 1
        s = int(rng.random() * len(a.shipment_ids)) if a.shipment_ids else None
        sa = self.r.shipment(s)["attributes"] if s is not None else {}
        bl = sa.get("bill_of_lading_number", "")
        doc_types = rng.sample(DOCUMENT_TYPES, 1 + (rng.random() < 0.4))
        supplier = rng.choice(_SUPPLIERS)
        domain = supplier.split()[0].lower() + ".example.com"
        inv = f"INV-{int(rng.random() * 90000) + 10000}"
        subject = (
            f"Invoice #{inv}"
            if doc_types[0] == "commercial_invoice"
            else f"{_LABELS[doc_types[0]]} {bl}"
        )
        eid = derive_uuid(a.seed, "email_submission", self._emails_made)
        email = Email(
            eid,
            subject,
            f"Please find attached {subject.lower()} for B/L {bl}.",
            f"ap@{domain}",
            f"<{eid[:12]}@{domain}>",
            iso(when - 13),
            iso(when),
        )
        self.emails[eid] = email
        for t in doc_types:
            first = a.shipments.get(s, "first") if s is not None else 0
            cn = self.r.container(first)["attributes"]["number"] if s is not None else ""
            fname = f"{t}_{bl or eid[:8]}.pdf"
            data = fake_pdf(
                [
                    _LABELS[t],
                    f"Bill of Lading {bl}",
                    f"Container {cn}",
                    inv if t == "commercial_invoice" else "",
                    f"From {supplier}",
                ]
            )
            self._n += 1
            blob = Blob(
                self._n,
                derive_uuid(a.seed, "blob", f"email:{self._n}"),
                hashlib.blake2b(f"{a.seed}:e{self._n}".encode(), digest_size=14).hexdigest(),
                fname,
                "application/pdf",
                len(data),
                md5_b64(data),
                iso(when),
                data,
            )
            self.blobs[blob.id] = blob
            self.blob_by_key[blob.key] = blob
            doc = Document(
                derive_uuid(a.seed, "document", f"email:{self._n}"),
                fname,
                "email",
                blob,
                iso(when),
                iso(when),
                None,
                eid,
            )
            self._add(doc)
            email.documents.append(doc.id)
        return email

    # ---- rendering ---------------------------------------------------------------------------
    def document(self, d: Document) -> Resource:
        """The ``document`` resource."""
        b = d.blob
        return {
            "id": d.id,
            "type": "document",
            "attributes": {
                "name": d.name,
                "document_type": d.document_type,
                "document_type_manual": None,
                "classification_notes": d.classification_notes,
                "source": d.source,
                "file_name": b.filename,
                "file_content_type": b.content_type,
                "file_size_bytes": b.byte_size,
                "created_at": d.created_at,
                "updated_at": d.updated_at,
            },
            "relationships": {
                "account": {"data": {"id": self.account_id, "type": "account"}},
                "user": {"data": {"id": d.user_id, "type": "user"} if d.user_id else None},
                "email_submission": {
                    "data": {"id": d.email_id, "type": "email_submission"} if d.email_id else None
                },
                "last_document_representation": {
                    "data": {"id": d.representation.id, "type": "document_representation"}
                    if d.representation
                    else None
                },
                "shipments": {"data": [{"id": x, "type": "shipment"} for x in d.shipments]},
                "cargos": {"data": [{"id": x, "type": "container"} for x in d.containers]},
            },
            "links": {"self": f"/documents/{d.id}", "download": f"/documents/{d.id}/download_url"},
        }

    def email_brief(self, e: Email) -> Resource:
        """The email submission as included with a document (``body_preview``)."""
        return {
            "id": e.id,
            "type": "email_submission",
            "attributes": {
                "subject": e.subject,
                "body_preview": e.body[:120],
                "from": [e.sender],
                "to": [DOCS_ALIAS],
                "cc": [],
                "message_id": e.message_id,
                "sent_at": e.sent_at,
                "created_at": e.created_at,
                "updated_at": e.created_at,
            },
        }

    def email(self, e: Email) -> Resource:
        """The full ``email_submission`` resource."""
        docs = [self.documents[d] for d in e.documents]
        return {
            "id": e.id,
            "type": "email_submission",
            "attributes": {
                "subject": e.subject,
                "body": e.body,
                "from": [e.sender],
                "to": [DOCS_ALIAS],
                "cc": [],
                "sent_at": e.sent_at,
                "message_id": e.message_id,
                "in_reply_to": None,
                "references": [],
                "content_type": "multipart/mixed",
                "documents_count": len(docs),
                "created_at": e.created_at,
                "updated_at": e.created_at,
            },
            "relationships": {
                "account": {"data": {"id": self.account_id, "type": "account"}},
                "user": {"data": None},
                "documents": {"data": [{"id": d.id, "type": "document"} for d in docs]},
            },
            "links": {"self": f"/v2/email_submissions/{e.id}"},
        }

    def email_document(self, d: Document) -> Resource:
        """A document as included with an email submission."""
        return {
            "id": d.id,
            "type": "document",
            "attributes": {
                "name": d.name,
                "source": d.source,
                "document_type": d.document_type,
                "created_at": d.created_at,
                "updated_at": d.updated_at,
            },
            "relationships": {
                "last_document_representation": {
                    "data": {"id": d.representation.id, "type": "document_representation"}
                    if d.representation
                    else None
                }
            },
        }

    @staticmethod
    def representation(rep: Representation) -> Resource:
        """The ``document_representation`` resource."""
        return {
            "id": rep.id,
            "type": "document_representation",
            "attributes": {
                "schema_version": rep.schema_version,
                "payload": rep.payload,
                "created_at": rep.created_at,
                "updated_at": rep.created_at,
            },
        }

    def included(self, d: Document, includes: list[str]) -> list[Resource]:
        """Includes of a document: ``email_submission``, ``last_document_representation``
        (alias ``current_extraction``), ``account``, ``user``, ``shipments``, ``cargos``."""
        out: list[Resource] = []
        if "email_submission" in includes and d.email_id:
            out.append(self.email_brief(self.emails[d.email_id]))
        if d.representation and (
            "last_document_representation" in includes or "current_extraction" in includes
        ):
            out.append(self.representation(d.representation))
        if "shipments" in includes:
            out += [self.r.shipment(self.a.shipment_index[s]) for s in d.shipments]
        if "cargos" in includes:
            out += [self.r.container(self.a.container_index[c]) for c in d.containers]
        return out

    def _occurrence(self, d: Document, event: str) -> Occurrence:
        inc = [self.document(d)]
        if d.email_id:
            inc.append(self.email_brief(self.emails[d.email_id]))
        if d.representation:
            inc.append(self.representation(d.representation))
        return Occurrence(event, iso(self.a.clock), None, inc, document_id=d.id)

    def truth(self) -> dict[str, Any]:
        """Ground truth: documents (with state and a content MD5), emails, representations."""
        docs = []
        for d in self.documents.values():
            docs.append({**self.document(d), "state": d.state, "checksum": d.blob.checksum})
        reps = [
            self.representation(d.representation)
            for d in self.documents.values()
            if d.representation
        ]
        return {
            "clock": iso(self.a.clock),
            "documents": docs,
            "email_submissions": [self.email(e) for e in self.emails.values()],
            "document_representations": reps,
        }

    def sample(self, event: str) -> Occurrence:
        """An example document occurrence (an extracted email document if any)."""
        for d in self.documents.values():
            if event == "document.extracted" and d.state == "extracted":
                return self._occurrence(d, event)
            if event == "document.extraction_failed" and d.state == "failed":
                return self._occurrence(d, event)
        now = iso(self.a.clock)
        data = b"not a pdf"
        blob = Blob(
            0,
            derive_uuid(self.a.seed, "blob", "example"),
            "example",
            "scan.txt",
            "text/plain",
            len(data),
            md5_b64(data),
            now,
            data,
        )
        doc = Document(
            derive_uuid(self.a.seed, "document", "example"),
            "scan.txt",
            "upload",
            blob,
            now,
            now,
            self.user_id,
        )
        if event == "document.extracted":
            doc.blob = Blob(
                0,
                blob.id,
                "example",
                "invoice.pdf",
                "application/pdf",
                2048,
                blob.checksum,
                now,
                fake_pdf(["Commercial Invoice", "INV-10027"]),
            )
            doc.name = "invoice.pdf"
            doc.document_type = "commercial_invoice"
            doc.representation = Representation(
                derive_uuid(self.a.seed, "representation", "example"),
                SCHEMA_VERSION,
                {
                    "invoice_number": "INV-10027",
                    "invoice_date": now[:10],
                    "supplier_name": _SUPPLIERS[0],
                    "total_amount": "12450.00",
                    "currency": "USD",
                },
                now,
            )
        else:
            doc.classification_notes = "Unsupported file type: not a PDF or image"
        return self._occurrence(doc, event)
