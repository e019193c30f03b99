"""``/admin``: move the sandbox's world and read its ground truth (API key, never faulted).

Clock and world: ``GET /clock``, ``POST /advance?hours=&minutes=&spread=``,
``POST /refresh?count=``, ``POST /delete?container=``. Ground truth: ``GET /ground_truth``,
``GET /ground_truth/timestamps``, ``GET /ground_truth/notifications?event=``,
``GET /ground_truth/documents``. Request statistics: ``GET /stats``, ``POST /stats/reset``.
Webhooks: ``POST /webhooks/flush?timeout=&due_only=``, ``POST /webhooks/blast?count=&...``,
``GET /webhooks`` (summary). Documents: ``POST /documents/process?id=``.
Answers are plain ``application/json``.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from sandbox.api.jsonapi import admin, api_response, dumps, not_found, state_of
from sandbox.render import iso
from sandbox.state import SandboxState


def _json(body: Any) -> Response:
    return Response(dumps(body), media_type="application/json")


def _clock_body(state: SandboxState) -> dict[str, Any]:
    return {"clock": iso(state.account.clock)}


def _qfloat(request: Request, name: str, default: float) -> float:
    raw = request.query_params.get(name)
    try:
        return float(raw) if raw not in (None, "") else default
    except ValueError:
        raise ValueError(f"{name} must be a number, got {raw!r}") from None


# ---- clock and world ---------------------------------------------------------------------------
@admin
async def clock(request: Request) -> Response:
    """``GET /admin/clock``."""
    return api_response(_clock_body(state_of(request)))


@admin
async def advance(request: Request) -> Response:
    """``POST /admin/advance``: move the clock and emit what the change would."""
    state = state_of(request)
    hours = float(request.query_params.get("hours", "0") or 0)
    minutes = float(request.query_params.get("minutes", "0") or 0)
    spread = float(request.query_params.get("spread", "0") or 0)
    seconds = round(hours * 3600 + minutes * 60)
    if seconds < 0 or spread < 0:
        raise ValueError("hours/minutes/spread must not be negative")
    before = len(state.hub.notifications)
    changed, new = state.advance(seconds, spread)
    return api_response(
        {
            **_clock_body(state),
            "changed_containers": changed,
            "new_containers": new,
            "notifications": len(state.hub.notifications) - before,
        }
    )


@admin
async def refresh(request: Request) -> Response:
    """``POST /admin/refresh``: re-stamp ``count`` containers as refreshed now."""
    state = state_of(request)
    count = int(request.query_params.get("count", "1"))
    if count < 0:
        raise ValueError("count must not be negative")
    refreshed = state.account.refresh(count)
    return api_response({**_clock_body(state), "refreshed": len(refreshed)})


@admin
async def delete(request: Request) -> Response:
    """``POST /admin/delete?container=ID``."""
    state = state_of(request)
    acct = state.account
    cid = request.query_params.get("container", "")
    i = acct.container_index.get(cid)
    if i is None:
        return not_found()
    acct.delete(i)
    return api_response({**_clock_body(state), "deleted": cid})


# ---- ground truth ------------------------------------------------------------------------------
@admin
async def timestamps(request: Request) -> Response:
    """``GET /admin/ground_truth/timestamps``: ``updated_at`` per container and shipment."""
    state = state_of(request)
    acct = state.account
    c, sh = acct.containers, acct.shipments
    body = {
        **_clock_body(state),
        "containers": {
            acct.container_ids[i]: {"updated_at": iso(c.get(i, "refreshed"))}
            for i in range(len(acct.container_ids))
            if i not in acct.deleted
        },
        "shipments": {
            sid: {
                "updated_at": iso(sh.get(s, "updated")),
                "pod_eta_changed_at": iso(acct.eta_changed_at(s)),
            }
            for s, sid in enumerate(acct.shipment_ids)
        },
    }
    return _json(body)


@admin
async def ground_truth(request: Request) -> Response:
    """``GET /admin/ground_truth``: every live container and shipment, terminals and ports."""
    state = state_of(request)
    acct, r = state.account, state.renderer
    body = {
        **_clock_body(state),
        "containers": [
            r.container(i)
            for i in range(len(acct.container_ids))
            if not (acct.deleted and i in acct.deleted)
        ],
        "shipments": [r.shipment(s) for s in range(len(acct.shipment_ids))],
        "terminals": r.terminals(),
        "ports": r.ports(),
    }
    return _json(body)


@admin
async def notifications(request: Request) -> Response:
    """``GET /admin/ground_truth/notifications``: every notification with its exact body."""
    state = state_of(request)
    event = request.query_params.get("event")
    notes = [
        n.truth() for n in state.hub.notifications.values() if event is None or n.event == event
    ]
    return _json({"clock": iso(state.account.clock), "notifications": notes})


@admin
async def documents(request: Request) -> Response:
    """``GET /admin/ground_truth/documents``."""
    return _json(state_of(request).docs.truth())


# ---- request statistics ------------------------------------------------------------------------
def _stats(state: SandboxState) -> Response:
    return _json(
        {
            "requests": state.requests,
            "by_status": dict(state.by_status),
            "faults": dict(state.fault_counts),
        }
    )


@admin
async def stats(request: Request) -> Response:
    """``GET /admin/stats``: ``/v2`` requests, by status and by injected fault."""
    return _stats(state_of(request))


@admin
async def stats_reset(request: Request) -> Response:
    """``POST /admin/stats/reset``: zero the statistics, answer them."""
    state = state_of(request)
    state.reset_stats()
    return _stats(state)


# ---- webhooks and documents --------------------------------------------------------------------
@admin
async def webhooks_flush(request: Request) -> Response:
    """``POST /admin/webhooks/flush``: wait until deliveries settle (or ``timeout``)."""
    hub = state_of(request).hub
    timeout = _qfloat(request, "timeout", 30.0)
    due_only = request.query_params.get("due_only", "false").lower() in ("1", "true", "yes")
    settled = await hub.flush(timeout, due_only)
    return _json({"settled": settled, **hub.summary()})


@admin
async def webhooks_blast(request: Request) -> Response:
    """``POST /admin/webhooks/blast``: see :meth:`~sandbox.webhook_hub.WebhookHub.blast`."""
    state = state_of(request)
    hub = state.hub
    count = int(_qfloat(request, "count", 100))
    rates = {k: _qfloat(request, k, 0.0) for k in ("duplicates", "bad_signature", "malformed")}
    if count < 0 or any(not 0 <= v <= 10 for v in rates.values()):
        raise ValueError("count must be >= 0 and rates in [0, 10]")
    seed = int(_qfloat(request, "seed", 0))
    concurrency = int(_qfloat(request, "concurrency", 20))
    wid = request.query_params.get("webhook_id")
    if wid:
        hook = hub.webhooks.get(wid)
        if hook is None:
            raise ValueError(f"no webhook {wid}")
    else:
        active = [h for h in hub.webhooks.values() if h.active]
        if len(active) != 1:
            raise ValueError(f"{len(active)} active webhooks; pass webhook_id")
        hook = active[0]
    if not state.account.container_ids:
        raise ValueError("the account has no containers")
    report = await hub.blast(
        state.builder,
        hook,
        count,
        rates["duplicates"],
        rates["bad_signature"],
        rates["malformed"],
        seed,
        concurrency,
    )
    return _json(report)


@admin
async def webhooks_summary(request: Request) -> Response:
    """``GET /admin/webhooks``: notification counts and the registered webhooks."""
    hub = state_of(request).hub
    return _json({**hub.summary(), "webhooks": [h.resource() for h in hub.webhooks.values()]})


@admin
async def documents_process(request: Request) -> Response:
    """``POST /admin/documents/process``: process pending documents now (all or ``id``s)."""
    state = state_of(request)
    ids = request.query_params.getlist("id") or None
    done = state.process_documents(ids)
    return _json({"processed": done, "pending": len(state.docs.pending())})
