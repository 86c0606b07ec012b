// The Plant Store from a page on another origin: fetch() with the bearer token for the
// operations, and EventSource with a watch ticket for the change feed (EventSource cannot send
// an Authorization header, and a token must never be put in a URL). The service must list this
// page's origin in PLANTS_CORS_ORIGINS.

const $ = (id) => document.getElementById(id);
let api = "";
let token = "";
let source = null;
let generation = 0; // counts the watches started (Connect, or a start over after `gone`)
let lastEventId = ""; // where the feed is followed from; each event's id is the cursor after it
let delay = 1; // seconds before the next watch once a source closes: doubles until one opens

function show(text, isError = false) {
  $("message").textContent = text;
  $("message").className = isError ? "error" : "";
}

async function call(method, path, body) {
  const headers = { Authorization: `Bearer ${token}` };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const response = await fetch(api + path, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const record = await response.json();
  if (!response.ok) {
    const error = new Error(`${response.status}: ${record.message}`);
    error.status = response.status;
    error.retryAfter = Number(response.headers.get("Retry-After")) || 0; // seconds; exposed by CORS
    throw error;
  }
  return record;
}

const plants = new Map(); // id -> plant: the listing, kept up to date by the feed's events

function render() {
  const sorted = [...plants.values()].sort((a, b) => a.id - b.id);
  $("plants").replaceChildren(
    ...sorted.map((plant) => {
      const item = document.createElement("li");
      item.dataset.id = plant.id;
      item.textContent = `${plant.id}: ${plant.name}${plant.tag ? ` (${plant.tag})` : ""}`;
      return item;
    }),
  );
}

async function listPlants() {
  const items = [];
  let next = null;
  do {
    const page = await call("GET", next ? `/plants?after=${encodeURIComponent(next)}` : "/plants");
    items.push(...page.plants);
    next = page.next;
  } while (next);
  plants.clear();
  for (const plant of items) plants.set(plant.id, plant);
  render();
}

// Each event is applied to the list (the follower's rule, docs/change-feed.md), not answered with
// a new listing: a listing per event would cost the whole store's pages each time, and under a
// rate limit a burst of events would leave the list as the last listing allowed saw it.
function showEvent(event) {
  const record = JSON.parse(event.data);
  lastEventId = event.lastEventId || lastEventId;
  const item = document.createElement("li");
  item.dataset.type = record.type;
  item.dataset.id = record.plant.id;
  item.textContent = `${record.time} ${record.type} ${record.plant.id}: ${record.plant.name}`;
  $("events").append(item);
  if (record.type === "plant.deleted") plants.delete(record.plant.id);
  else plants.set(record.plant.id, record.plant);
  render();
}

// The position first, then the listing, then the feed from that position: every change made
// while the listing was read comes as an event, and applying one twice is harmless.
async function start() {
  const watching = ++generation;
  delay = 1;
  await listFromNow();
  await watch(watching);
}

async function listFromNow() {
  const { next } = await call("GET", "/events?after=now");
  lastEventId = next;
  await listPlants();
}

// A ticket serves until it expires; EventSource reconnects by itself (same URL, Last-Event-ID)
// while it is good. Once a reconnection is refused the source closes: mint a new ticket and
// follow on from the last event seen. EventSource shows no status (an expired ticket's 401, the
// token's watcher cap's 429 look the same), so the wait doubles, up to a minute, with each source
// refused in a row. A mint refused for a while (429, 503: the token's rate limit, a busy service)
// or lost on the network is tried again, after its Retry-After, else after that wait: giving up
// would leave the list stale for good, and trying every second would add to the load that
// refused it.
function nextDelay() {
  const seconds = delay;
  delay = Math.min(delay * 2, 60);
  return seconds;
}

function reconnect(watching, seconds) {
  $("status").textContent = "reconnecting";
  setTimeout(() => resume(watching).catch((error) => {
    show(error.message, true);
    const transient = error.status === undefined || error.status === 429 || error.status >= 500;
    if (watching !== generation) return;
    if (transient) reconnect(watching, error.retryAfter || nextDelay());
    else $("status").textContent = "not connected"; // 401, 403: the token is no longer good
  }), seconds * 1000);
}

// A source refused at its start shows no status either: were its position no longer kept (410:
// away longer than the feed keeps its events; 400: a service that started afresh), every source
// would be refused and the list stale for good. A page of the feed from that position tells,
// before each source a closed one is replaced with; not kept, the page lists the plants again.
async function resume(watching) {
  try {
    await call("GET", `/events?after=${encodeURIComponent(lastEventId)}&limit=1`);
  } catch (error) {
    if (error.status !== 410 && error.status !== 400) throw error;
    if (watching !== generation) return;
    await listFromNow();
  }
  await watch(watching);
}

async function watch(watching) {
  const { ticket } = await call("POST", "/events/tickets");
  if (watching !== generation) return; // connected again meanwhile: that watch replaces this one
  const url = `${api}/events?after=${encodeURIComponent(lastEventId)}&ticket=${encodeURIComponent(ticket)}`;
  if (source) source.close();
  const current = new EventSource(url);
  source = current;
  current.onopen = () => {
    delay = 1;
    $("status").textContent = "watching";
  };
  for (const type of ["plant.created", "plant.updated", "plant.deleted"]) {
    current.addEventListener(type, showEvent);
  }
  current.addEventListener("gone", () => { // the position fell out of the feed: start again
    current.close();
    start().catch((error) => show(error.message, true));
  });
  current.onerror = () => {
    if (current.readyState === EventSource.CLOSED && watching === generation) reconnect(watching, nextDelay());
  };
}

$("connect").addEventListener("submit", async (event) => {
  event.preventDefault();
  api = $("api").value.replace(/\/+$/, "");
  token = $("token").value;
  if (source) source.close();
  try {
    await start();
  } catch (error) {
    $("status").textContent = "not connected";
    show(error.message, true);
  }
});

$("create").addEventListener("submit", async (event) => {
  event.preventDefault();
  const plant = { id: Number($("plant-id").value), name: $("plant-name").value };
  if ($("plant-tag").value) plant.tag = $("plant-tag").value;
  try {
    const created = await call("POST", "/plants", plant);
    show(`Created ${created.name}.`);
  } catch (error) {
    show(error.message, true);
  }
});
