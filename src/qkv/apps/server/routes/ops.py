"""Operations: GET /health ({"status": "ok", "pairs": [...], "queue": n}) and GET /metrics
(Prometheus text format; see `Metrics`)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from ..service import ServiceDep

router = APIRouter(tags=["qkv"])


@router.get("/health")
async def health(svc: ServiceDep) -> dict[str, Any]:
    return {"status": "ok", "pairs": list(svc.served), "queue": svc.queue}


@router.get("/metrics")
async def prometheus(svc: ServiceDep) -> Response:
    return Response(generate_latest(svc.metrics.registry), media_type=CONTENT_TYPE_LATEST)
