"""The peer: POST /plants in FastAPI with async handlers and pydantic v2, under uvicorn.

Same semantics as the service: strict int64 id, no extra fields, bearer check (constant time),
409 on a conflicting duplicate, identical replay 200. Tokens come from PLANTS_API_TOKENS.
"""

from __future__ import annotations

import hmac
import os
from typing import Annotated

from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr

TOKENS = [t.strip().encode() for t in os.environ["PLANTS_API_TOKENS"].split(",") if t.strip()]


class NewPlant(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    id: Annotated[StrictInt, Field(ge=-(2**63), le=2**63 - 1)]
    name: Annotated[StrictStr, Field(min_length=1, max_length=200)]
    tag: Annotated[StrictStr, Field(min_length=1, max_length=100)] | None = None


class Plant(BaseModel):
    name: str
    tag: str | None = None


app = FastAPI()
plants: dict[int, tuple[str, str | None]] = {}


async def bearer(request: Request) -> None:
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not token:
        raise HTTPException(401, "missing bearer token", {"WWW-Authenticate": 'Bearer realm="plants"'})
    matched = False
    for candidate in TOKENS:
        matched |= hmac.compare_digest(candidate, token.encode())
    if not matched:
        raise HTTPException(
            401, "invalid token", {"WWW-Authenticate": 'Bearer realm="plants", error="invalid_token"'}
        )


@app.exception_handler(HTTPException)
async def http_error(request: Request, exc: HTTPException) -> JSONResponse:
    return JSONResponse({"error": exc.status_code, "message": exc.detail}, exc.status_code, exc.headers)


@app.exception_handler(RequestValidationError)
async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
    return JSONResponse({"error": 400, "message": "invalid NewPlant"}, 400)


@app.post("/plants", response_model=Plant, response_model_exclude_none=True, dependencies=[Depends(bearer)])
async def create_plant(new: NewPlant) -> Plant:
    record = (new.name, new.tag)
    stored = plants.setdefault(new.id, record)  # atomic: one event loop thread
    if stored != record:
        raise HTTPException(409, "conflict")
    return Plant(name=new.name, tag=new.tag)
