"""gunicorn settings for the Plant Store service, shipped inside the package.

    gunicorn -c python:app.server.gunicorn_conf        # from any directory, once installed

(The project's own `gunicorn.conf.py`, read by default from its directory, is this file.)
Each setting can be changed through the environment variable named beside it, and any of
them on gunicorn's command line.

At start, in the master and before any worker forks, every setting of the service is checked:
a bad one stops gunicorn with one line that names it. The in-memory store holds gunicorn at one
worker, however it is asked for more (`--workers`, `WEB_CONCURRENCY`, SIGTTIN); with a shared
store (PLANTS_STORE_URL=redis://...) `--workers N` and `WEB_CONCURRENCY` are honoured.
"""

from __future__ import annotations

import atexit
import gc
import os
import shutil
import signal
import threading
import time
from pathlib import Path
from typing import Any

from app.compat import release_warnings
from app.compat.gunicorn import pre_request as close_when_asked
from app.server import gunicorn_options, handoff
from app.server.directories import metrics_parent, workers_directory
from app.server.settings_check import environ_log_format
from app.settings import ConfigurationError
from app.settings.server import check_server_names, server_setting
from app.telemetry.logs import logging_config


def _setting(name: str, default: str | None = None) -> Any:
    """The environment variable `name`, as app/settings/server.py declares it, or one line that names it."""
    try:
        return server_setting(name, default=default)
    except ConfigurationError as exc:
        raise SystemExit(f"Plant Store: configuration error: {exc}") from None


try:
    check_server_names()
except ConfigurationError as exc:
    raise SystemExit(f"Plant Store: configuration error: {exc}") from None


def _store_is_shared() -> bool:
    from app.settings import from_environ, store_location
    from app.store import StoreUrl

    return StoreUrl.parse(store_location(from_environ())[0]).shared


def _shared_or_unknown() -> bool:
    try:
        return _store_is_shared()
    except Exception:  # a bad setting: on_starting reports it next
        return True


def _default_threads() -> str:
    """Request threads per worker: 1 with the in-memory store, 2 with a shared one.

    The in-memory store's work is all CPU under one GIL, so a second thread adds no throughput.
    It does make the GIL's hand-off unfair: a thread woken for a request can wait while the other
    serves request after request, up to the 5 ms switch interval, and under open-loop load that
    wait makes the worker's tail latency (bench/README.md). With a shared store, threads overlap
    the round trips.
    """
    try:
        return "2" if _store_is_shared() else "1"
    except Exception:  # a bad setting: on_starting reports it in one line, before any fork
        return "1"


wsgi_app = "app:create_app()"
bind = _setting("GUNICORN_BIND")

# gunicorn's own convention; the in-memory store allows only 1 (see on_starting).
workers = _setting("WEB_CONCURRENCY")
# The packaged worker (app/server/worker/): httptools frames every request, and no slow client
# holds a thread. GUNICORN_WORKER_CLASS=gthread runs gunicorn's stock threaded worker instead.
worker_class = _setting("GUNICORN_WORKER_CLASS")


def _check_worker_class(name: str) -> None:
    """A worker class gunicorn cannot load is one line: gunicorn's own error (as it loads the
    class next, in the master) carries the import's traceback."""
    from gunicorn.util import load_class

    try:
        load_class(name)
    except Exception:
        raise SystemExit(
            f"Plant Store: configuration error: GUNICORN_WORKER_CLASS names no worker class gunicorn "
            f"can load ({name!r}): use app.server.worker.PlantsWorker (the default) or gthread"
        ) from None


_check_worker_class(worker_class)
threads = _setting("GUNICORN_THREADS", _default_threads())
# A stalled read from a client gives up after this many seconds (see app/server/worker/). Not a
# gunicorn setting, and so not a name gunicorn reads here (it drops names it does not know, in
# silence): post_worker_init hands it to the packaged worker.
PACKAGED_WORKER_READ_TIMEOUT = _setting("GUNICORN_READ_TIMEOUT")
# The bytes a worker holds for its clients at most: past it, the connections making the least
# progress are displaced (app/server/worker/loop.py). Also handed over in post_worker_init.
PACKAGED_WORKER_MEMORY_BUDGET = _setting("GUNICORN_MEMORY_BUDGET") * 1024 * 1024

# Behind a proxy that reuses upstream connections: keep idle ones open longer than the proxy
# does (nginx: keepalive_timeout 60s). Idle connections wait on the epoll, not on a thread.
keepalive = _setting("GUNICORN_KEEPALIVE")
timeout = 30
# Never recycle a worker after N requests: with the in-memory store a new worker starts empty.
max_requests = 0
graceful_timeout = _setting("GUNICORN_GRACEFUL_TIMEOUT")

# Which peers may set X-Forwarded-Proto for gunicorn itself: nobody unless set. Client address
# and scheme behind a proxy come from PLANTS_TRUSTED_PROXIES (ProxyFix, in the app).
forwarded_allow_ips = _setting("FORWARDED_ALLOW_IPS")
# The path prefix: each worker reads SCRIPT_NAME itself, so it is only checked here, in the master.
_setting("SCRIPT_NAME")

# No management socket: nothing here uses it, and its default path is shared per user.
control_socket_disable = True
# gunicorn's own hook's line, and under gthread `Connection: close, X` read as a close, as the
# packaged worker reads it (app/compat/gunicorn.py).
pre_request = close_when_asked


# Every line of every logger, gunicorn's own included, in one format on stdout (PLANTS_LOG_FORMAT,
# app/telemetry/logs.py), through gunicorn's documented logconfig_dict: no handler of gunicorn's own.
logconfig_dict = logging_config(environ_log_format())
accesslog = None
errorlog = None
# gunicorn's logger, computing only the atoms the access line uses (app/server/access_log.py).
logger_class = "app.server.access_log.AccessLogger"
# REMOTE_ADDR and the scheme as the app saw them (after ProxyFix); the time, the request's id and
# (in JSON) its fields come with the log format. No request headers are logged, so Authorization
# never reaches the log.
access_log_format = '%(h)s %({wsgi.url_scheme}e)s "%(r)s" %(s)s %(b)s %(M)sms'


def _upgrading() -> bool:
    """Whether this master is the new one of gunicorn's binary upgrade (SIGUSR2): gunicorn starts it
    with the old master's pid in GUNICORN_PID (and its sockets in GUNICORN_FD), until it is promoted."""
    return bool(os.environ.get("GUNICORN_PID"))


#: Names the metrics directory a master made (and removes at its exit), never one named by the
#: operator: set with PROMETHEUS_MULTIPROC_DIR, it goes wherever that goes (a reload's environment,
#: which gunicorn hands the master SIGUSR2 starts), and still says so once that directory is gone.
#: Not a `PLANTS_*` name: those are settings.
_MADE_VARIABLE = "PROMETHEUS_MULTIPROC_DIR_MADE"


def _prepare_metrics_directory(server: Any) -> None:
    """prometheus_client's multiprocess mode: every worker writes its counts into one directory,
    and /metrics sums them. Made here (and removed at exit) unless PROMETHEUS_MULTIPROC_DIR names
    one; a named one is emptied of an earlier run's files (not of a running one's, at SIGUSR2).
    The one made here is the workers' user's (directories.py): with `--user` a worker could not
    write its counts into root's. It is made in
    /dev/shm when that is another file system than the reload's snapshot's: a snapshot that fills
    its directory must not leave a worker a memory-mapped page it cannot write (SIGBUS).

    The in-memory store runs one worker, whose counts are the total: none is made, and its metrics
    stay in process, where an increment is a lock and an add (a file's costs a `getpid` system call
    each, about five per create). A reload then starts the counters again at zero, which
    Prometheus's `rate()` reads as a counter reset."""
    directory = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if directory and directory == os.environ.get(_MADE_VARIABLE):
        # Made by the master this one upgrades (SIGUSR2; its variable is in the environment gunicorn
        # hands over once a reload has run), or by an earlier one, gone since (a second upgrade):
        # its workers' files, removed at its exit. Once it had, every request of this master's
        # workers was a 500 (prometheus_client's file not found); a gone one refused the start.
        del os.environ["PROMETHEUS_MULTIPROC_DIR"]
        directory = None
    if not directory and not _shared_or_unknown():
        return
    if directory and not (os.path.isdir(directory) and os.access(directory, os.W_OK | os.X_OK)):
        # Else the memory store's check below, or each worker's first count, was a traceback.
        raise SystemExit(
            f"Plant Store: configuration error: PROMETHEUS_MULTIPROC_DIR names {directory!r}, which "
            "is not a directory the service can write in: make it, or unset it (one is then made)"
        )
    if directory:
        # Not in the master SIGUSR2 starts (gunicorn gives it the old master's pid): the old
        # master's workers still count into their files here, and its folds hold its dead ones'.
        if not _upgrading():
            for stale in Path(directory).glob("*.db"):
                stale.unlink()
    else:
        directory = str(
            workers_directory("plants-metrics-", server.cfg.uid, server.cfg.gid, metrics_parent())
        )
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = os.environ[_MADE_VARIABLE] = directory
        server.plants_metrics_directory = directory
        # on_exit removes it after a run; a start refused after this point (a bad setting, an
        # address in use) exits without on_exit, and each such start left a directory behind.
        atexit.register(_remove_made_directory, directory, os.getpid())


def _remove_made_directory(directory: str, master: int) -> None:
    """At the master's exit, however it exits (the workers it forked inherit the handler)."""
    if os.getpid() == master:
        shutil.rmtree(directory, ignore_errors=True)


def _refuse_log_files(cfg: Any) -> None:
    """gunicorn's `--access-logfile` and `--error-logfile` name files that logconfig_dict leaves
    empty (every line goes to stdout): an operator who set them, and rotated them with SIGUSR1,
    rotated empty files while the lines went elsewhere. Stdout (`-`, or `/dev/stdout`) is what the
    service does."""
    for option, value in (("--access-logfile", cfg.accesslog), ("--error-logfile", cfg.errorlog)):
        if value not in (None, "-", "/dev/stdout"):
            raise SystemExit(
                f"Plant Store: configuration error: gunicorn's {option} names a file ({value!r}), but "
                "every log line goes to stdout (PLANTS_LOG_FORMAT): leave it unset (or `-`) and send "
                "stdout where the logs belong (journald, the container's log, a pipe)"
            )


def _remove_pidfile_at_exit(server: Any) -> None:
    """gunicorn writes `--pid`'s file before on_starting and removes it only when it stops a run it
    started: a start refused here (or its address in use) left the file, naming a process gone."""
    if server.cfg.pidfile is not None:
        atexit.register(_remove_pidfile, str(server.cfg.pidfile), os.getpid())


def _remove_pidfile(path: str, master: int) -> None:
    """At the master's exit, not a worker's (they inherit the handler): the file, or the `.2` a new
    master of a binary upgrade writes, while it names this master (as gunicorn's own unlink checks:
    after an upgrade the file names the new master)."""
    if os.getpid() != master:
        return
    for name in (path, f"{path}.2"):
        try:
            with open(name, encoding="ascii") as file:
                if int(file.read() or 0) == master:
                    os.unlink(name)
        except (OSError, ValueError):
            continue


def on_starting(server: Any) -> None:
    """Check every setting, as each worker's app will, without building the app (no thread may
    run in the master when it forks); refuse a split store."""
    release_warnings()  # the checks' at import (this file's imports), held until gunicorn set the logs
    _remove_pidfile_at_exit(server)
    _refuse_log_files(server.cfg)
    _prepare_metrics_directory(server)  # before prometheus_client is first imported
    # Imported now, not first in child_exit: gunicorn 23 runs that hook inside its SIGCHLD
    # handler, and a second worker's exit during the import met a half-imported module there
    # (ImportError, and the master stopped).
    import prometheus_client.multiprocess  # noqa: F401

    import app.telemetry.metrics_files  # noqa: F401  # child_exit's too, for the same reason
    from app.telemetry import tracing

    asked = tracing.requested()
    if asked and not tracing.available():
        raise SystemExit(f"Plant Store: configuration error: {tracing.MISSING_EXTRA.format(asked)}")
    from app.auth import shared_keys
    from app.server.settings_check import accept_checked, checked_settings, summary

    try:
        settings, url = checked_settings()
    except ConfigurationError as exc:
        raise SystemExit(f"Plant Store: configuration error: {exc}") from None
    accept_checked()  # every worker reads the files as checked here, until a reload is accepted
    shared_keys.share()  # a worker started later verifies JWTs with the keys its siblings loaded
    problem = gunicorn_options.refusal(
        server.cfg, url.shared, settings.max_content_length, PACKAGED_WORKER_MEMORY_BUDGET
    )
    if problem is not None:
        raise SystemExit(problem)
    if _upgrading() and not url.shared:
        # gunicorn's binary upgrade (SIGUSR2; gunicorn gave this master the old one's pid): this
        # master's worker would serve an empty store beside the old one's, which then refuses
        # every request as a split store. The old master serves on, its plants kept.
        raise SystemExit(
            "Plant Store: refusing a binary upgrade (SIGUSR2) with the in-memory store: the new "
            "worker would start empty beside the old one, every plant out of reach; the old master "
            "serves on. A reload (SIGHUP) keeps the plants but runs the code this master started "
            "with; a new version needs a restart, which empties the in-memory store, or a shared "
            "store (PLANTS_STORE_URL=redis://...)."
        )
    if not url.shared:
        # A reload hands the store over (app/server/handoff.py), in a directory the workers own.
        directory = handoff.prepare(server.cfg.bind, server.cfg.uid, server.cfg.gid)
        # Metrics kept in process (the in-memory store's default) have no files to fill.
        named = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
        metrics = Path(named) if named else None
        if metrics is not None and metrics.stat().st_dev == directory.stat().st_dev:
            server.log.warning(
                "Plant Store: the metrics' files (%s) share a file system with the reload's snapshot "
                "(%s): a snapshot that fills it would kill the workers (SIGBUS). Set "
                "PROMETHEUS_MULTIPROC_DIR elsewhere (docs/operations.md#a-reload-is-a-transaction).",
                metrics,
                directory,
            )
    server.log.info(
        "Plant Store: %s; workers %s, request threads %s each",
        summary(settings, url),
        server.cfg.workers,
        server.cfg.threads,
    )


def when_ready(server: Any) -> None:
    """gunicorn has set its signal handlers: a reload is checked before gunicorn hears of it
    (app/server/reload_gate.py)."""
    from app.server import reload_gate

    reload_gate.install(server, PACKAGED_WORKER_MEMORY_BUDGET)


def pre_fork(server: Any, worker: Any) -> None:
    """The master knows its workers through this hook and child_exit (app/server/handoff.py)."""
    handoff.track(worker)


def nworkers_changed(server: Any, new_value: int, old_value: int | None) -> None:
    """SIGTTIN adds a worker without reading the settings again: hold the in-memory store at one."""
    if old_value is not None and new_value > 1 and not _store_is_shared():
        server.log.warning(
            "Plant Store: staying at 1 worker (asked for %s): the in-memory store cannot be shared "
            "between workers. Set PLANTS_STORE_URL to a shared store to run more.",
            new_value,
        )
        server.num_workers = 1


def post_worker_init(worker: Any) -> None:
    """The app is loaded: set the worker's read timeout and memory budget, and move every object
    made so far out of the cyclic GC's reach.

    A full (generation 2) collection walks every tracked object, and most of a worker's are its
    imports and its app, which live as long as it does: walking them all now and then paused a
    request under load for tens of milliseconds, which frozen they no longer do (bench/README.md).
    Objects made later, per request, are collected as before.
    """
    worker.read_timeout = PACKAGED_WORKER_READ_TIMEOUT
    worker.memory_budget = PACKAGED_WORKER_MEMORY_BUDGET
    _raise_open_file_limit(worker)
    _apply_script_name(worker)
    store = _memory_store_of(worker)
    if store is not None:
        handoff.read_if_any(store)  # the plants of the worker this one replaces, on a reload
        _prepare_on_sigwinch(worker, store)
    _drain_on_sigterm(worker)
    _start_tracing(worker)
    _bound_watches(worker)
    gc.freeze()
    # Each worker delivers webhooks in a background thread (PLANTS_WEBHOOKS_DELIVER=false: none).
    deliverer = _deliverer_of(worker)
    if deliverer is not None:
        # It starts the feed's listener once it has an endpoint to deliver to (app/extension.py).
        deliverer.start()


def _raise_open_file_limit(worker: Any) -> None:
    """Descriptors for every connection, as many closing, and the app's (under either worker)."""
    from app.server.open_files import raise_soft_limit
    from app.server.worker.loop import FD_RESERVE

    raise_soft_limit(2 * worker.cfg.worker_connections + FD_RESERVE)


def _apply_script_name(worker: Any) -> None:
    """SCRIPT_NAME as the packaged worker applies it, under any other worker (app/server/script_name.py)."""
    from app.server.script_name import take_over
    from app.server.worker import PlantsWorker

    if not isinstance(worker, PlantsWorker):
        take_over(worker)


def _prepare_on_sigwinch(worker: Any, store: Any) -> None:
    """The master's SIGWINCH (which gunicorn's workers otherwise ignore) asks the worker, while it
    serves, to reserve its snapshot's space before a reload (app/server/handoff.py)."""

    def on_sigwinch(signum: int, frame: Any) -> None:
        # In a thread: the handler interrupts the main thread wherever it is, the store's lock
        # perhaps held, and the reservation takes that lock.
        threading.Thread(target=handoff.prepare_in_worker, args=(store,), name="handoff", daemon=True).start()

    signal.signal(signal.SIGWINCH, on_sigwinch)
    handoff.serving(worker.pid)


def _start_tracing(worker: Any) -> None:
    """OpenTelemetry, when asked for (app/telemetry/tracing.py): started here, after the fork, so
    that each worker's exporter thread is its own."""
    from app.telemetry import tracing

    app = worker.wsgi
    if not tracing.requested() or not isinstance(getattr(app, "extensions", None), dict):
        return
    from app.extension import plants_state

    state = plants_state(app)
    worker.plants_tracing = tracing.start(app, state.store, trusted_proxies=state.settings.trusted_proxies)


def _drain_on_sigterm(worker: Any) -> None:
    """SIGTERM makes /readyz 503 at once (app/health.py), ends the watches of a worker that does
    not park them, then gunicorn's own handler stops the worker gracefully: no new connection,
    the requests in flight finish within GUNICORN_GRACEFUL_TIMEOUT, a kept-alive connection
    closes after its answer."""
    from app.extension import EXTENSION, plants_state
    from app.server.worker import PlantsWorker

    app = getattr(worker, "wsgi", None)
    if EXTENSION not in getattr(app, "extensions", {}):
        return
    state = plants_state(app)
    stopping = state.stopping
    # The packaged worker ends its parked watches as it stops. gthread waits for its request
    # threads, each watch holding one for as long as it lasts (a stream for minutes): ended here,
    # in a thread of their own (a wake-up takes locks this handler's thread may hold).
    end_watches = None if isinstance(worker, PlantsWorker) else state.feed_signal.stop_watches
    stop = signal.getsignal(signal.SIGTERM)

    def on_sigterm(signum: int, frame: Any) -> None:
        stopping.set()
        if end_watches is not None:
            threading.Thread(target=end_watches, name="plants-end-watches", daemon=True).start()
        if callable(stop):
            stop(signum, frame)

    signal.signal(signal.SIGTERM, on_sigterm)
    if end_watches is not None:
        _end_watches_when_stopping(worker, end_watches)


def _end_watches_when_stopping(worker: Any, end_watches: Any) -> None:
    """gthread stops itself too, without a signal: at `--max-requests` (or at a change of a source
    file, under `--reload`) it sets `alive` false, stops accepting, and waits for its connections.
    A watch held its request thread, and so the worker, for the graceful timeout, then its exit (it
    joins its request threads) until the master's heartbeat killed it: no worker accepted for a
    minute, and the stream was cut without its end. Its watches end as soon as it stops. gthread
    says so in no hook, so a thread of its own looks, twice a second."""

    def watch() -> None:
        while worker.alive:
            time.sleep(0.5)
        end_watches()

    threading.Thread(target=watch, name="plants-end-watches-at-stop", daemon=True).start()


def _bound_watches(worker: Any) -> None:
    """Woken watchers read a shared store on at most the request threads but one
    (app/watch/wake_gate.py): the last is left for requests, /healthz among them, however slow
    the store is. The in-memory store's reads wait on nothing but the CPU: no bound.

    A worker that does not park watches (gunicorn's stock gthread) holds a request thread for each
    as long as it lasts: it holds the request threads but one at most, the others refused (503)
    as past PLANTS_EVENTS_MAX_WATCHERS, so that one watch never stops every other request."""
    from app.extension import EXTENSION, plants_state
    from app.server.worker import PlantsWorker

    app = worker.wsgi
    if EXTENSION not in getattr(app, "extensions", {}):
        return
    state = plants_state(app)
    if state.store.shared:
        state.feed_signal.gate.resize(worker.cfg.threads - 1)
    if isinstance(worker, PlantsWorker):
        return
    held = min(state.feed_signal.max_watchers, worker.cfg.threads - 1)
    if held < state.feed_signal.max_watchers:
        state.feed_signal.max_watchers = held
        worker.log.warning(
            "Plant Store: under the %s worker each watch of the feed holds a request thread while it"
            " waits, so this worker holds %d at most (GUNICORN_THREADS %d, one kept for every other"
            " request) and refuses more with 503: raise GUNICORN_THREADS for more, or use the"
            " packaged worker, whose watches hold no thread.",
            type(worker).__name__,
            held,
            worker.cfg.threads,
        )


def _deliverer_of(worker: Any) -> Any:
    """The webhook deliverer of the app the worker serves (None for another app, or a worker
    stopped before it loaded its app: gunicorn 23 reloading under load quit one while it did)."""
    from app.extension import EXTENSION, plants_state

    app = getattr(worker, "wsgi", None)
    return plants_state(app).deliverer if EXTENSION in getattr(app, "extensions", {}) else None


def _memory_store_of(worker: Any) -> Any:
    """The memory store of the app the worker serves (None for a shared store or another app)."""
    from app.extension import EXTENSION, plants_state
    from app.store.memory.store import MemoryPlantStore

    app = getattr(worker, "wsgi", None)  # None: stopped before it loaded its app
    store = plants_state(app).store if EXTENSION in getattr(app, "extensions", {}) else None
    return store if isinstance(store, MemoryPlantStore) else None


def on_reload(server: Any) -> None:
    """With the memory store, the old worker stops and hands its plants over before the new one
    starts (app/server/handoff.py); with a shared store gunicorn's overlapping reload stands."""
    from app.server import reload_gate

    try:
        handoff.hand_over(server)
    finally:
        reload_gate.finished()


def worker_exit(server: Any, worker: Any) -> None:
    """A worker that stops gives up its webhook leases, so that another delivers at once; on a
    reload, with the memory store, it writes its plants for the next worker. (gunicorn also runs
    this hook in the master for a worker it finds gone.)"""
    handoff.forget(worker)
    deliverer = _deliverer_of(worker)
    store = _memory_store_of(worker)
    if deliverer is not None:
        # With the memory store nothing an attempt acknowledges later is kept (the snapshot is
        # written next), and a reload's master waits for this process to exit while requests
        # wait in the backlog: an attempt past the stop's wait is cut off rather than waited for.
        deliverer.stop(timeout=2.0, cut_off=store is not None)
    if store is not None:
        handoff.write_if_wanted(store)
    provider = getattr(worker, "plants_tracing", None)
    if provider is not None:
        from app.telemetry import tracing

        tracing.stop(provider)  # the spans still batched are exported, within a bound


def child_exit(server: Any, worker: Any) -> None:
    handoff.forget(worker)
    if not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        return  # in-process metrics: no file to mark
    from prometheus_client import multiprocess

    from app.telemetry import metrics_files  # imported first in on_starting

    multiprocess.mark_process_dead(worker.pid)
    # Its counts stay in the totals, its files not in the directory: the directory would grow by a
    # worker's files at every replacement (a reload, a crash, a timeout), and each scrape read them all.
    # A deferred pid that a live worker has taken since is its files now (prometheus_client reopens
    # them): folded, they would be unlinked under it. They are folded at that worker's exit.
    live = handoff.tracked_pids()
    earlier = [pid for pid in getattr(server, "plants_unfolded_workers", ()) if pid not in live]
    unfolded = [*earlier, worker.pid]
    # Pending before the fold, and kept after it if added meanwhile: gunicorn 23 runs this hook in
    # its SIGCHLD handler, so another worker's exit may run it again mid-fold (deferred: locked).
    server.plants_unfolded_workers = unfolded
    left = metrics_files.fold(os.environ["PROMETHEUS_MULTIPROC_DIR"], unfolded)
    added = [pid for pid in server.plants_unfolded_workers if pid not in unfolded]
    server.plants_unfolded_workers = [*left, *added]


def on_exit(server: Any) -> None:
    handoff.remove()  # the metrics directory a master made goes at its exit (its atexit handler)
