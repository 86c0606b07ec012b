"""The shared-store peer: the FastAPI peer's create, on Redis through redis.asyncio and hiredis.

Same one-script round trip as the service's Redis store (the same create script with its indexes,
keys and encoding), in one async process. PLANTS_STORE_URL and PLANTS_STORE_PREFIX as for the service.
"""

from __future__ import annotations

import os

import redis.asyncio
from fastapi import Depends, HTTPException

from app.store.redis.groups import Groups, encode
from app.store.redis.lua import CREATE
from bench.apps.fastapi_peer import NewPlant, Plant, app, bearer

client = redis.asyncio.Redis.from_url(os.environ["PLANTS_STORE_URL"])
create_script = client.register_script(CREATE)
PREFIX = os.environ.get("PLANTS_STORE_PREFIX", "plants")
CAPACITY = int(os.environ.get("PLANTS_MAX_PLANTS", "1000000"))
GROUPS = Groups(PREFIX, count=1, capacity=CAPACITY, cluster=False)

# The in-memory peer's route is replaced by this one.
app.router.routes = [route for route in app.router.routes if getattr(route, "path", None) != "/plants"]


@app.post("/plants", response_model=Plant, response_model_exclude_none=True, dependencies=[Depends(bearer)])
async def create_plant(new: NewPlant) -> Plant:
    keys, args = GROUPS.create_call(new.id, encode(new.name, new.tag))
    answer = await create_script(keys=keys, args=args)
    if answer == 2:
        raise HTTPException(409, "conflict")
    if answer == 3:
        raise HTTPException(507, "full")
    return Plant(name=new.name, tag=new.tag)
