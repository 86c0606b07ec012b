"""The initial state of a stream asked with `snapshot=true`: one `plant.existing` block per plant
that its filter selects now, a page of the store at a time, then a bookmark marked
`initial_end`, from which the stream follows the feed.

The stream's position is taken before the first page is read, so every change made while the
pages are read comes after the bookmark too: a client that applies both (an upsert for existing,
created and updated plants, a delete for deleted ones and for those that no longer match) holds
an exact copy, whatever was written meanwhile. Only one page is held at once, so a snapshot of
any size takes the memory of one page (and the socket's buffer: the worker sends a page before
it asks for the next).
"""

from __future__ import annotations

from collections.abc import Iterator

from app.schemas.records import stored_plant
from app.store import PlantStore
from app.store.base import StoredPlant
from app.watch.event_data import event_data
from app.watch.filters import EventFilter

#: The plants one read of the store takes.
SNAPSHOT_PAGE = 200


def existing(store: PlantStore, only: EventFilter | None) -> Iterator[list[StoredPlant]]:
    """The plants `only` selects now (by its `tags` and `ids`; `types` concern changes only),
    a page at a time."""
    if only is not None and only.ids is not None:
        ids = sorted(only.ids)  # at most 100
        found: list[StoredPlant] = []
        for plant_id in ids:
            plant = store.get(plant_id)
            if plant is not None and (only.tags is None or plant.tag in only.tags):
                found.append((plant_id, plant.name, plant.tag))
        yield found
        return
    tags = None if only is None else only.tags
    after = None
    while True:
        page = store.page(after, SNAPSHOT_PAGE, tags)
        yield page.plants
        if page.next is None:
            return
        after = page.next


def existing_blocks(plants: list[StoredPlant]) -> bytes:
    """The plants as `event: plant.existing` blocks, without `id:` (no position is in them: a
    stream broken before its `initial_end` starts again from nothing)."""
    blocks = []
    for plant in plants:
        record = {"type": "plant.existing", "plant": stored_plant(*plant)}
        blocks.append(f"event: plant.existing\ndata: {event_data(record)}\n\n")
    return "".join(blocks).encode()
