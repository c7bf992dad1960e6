"""mooncake.mooncake_store_service: a store client behind a small REST API.

``mc_store_rest_server [--config PATH] [-D key=value ...] [--port 8080]
[--host 127.0.0.1] [--allow_remote] [--segment_dir /dev/shm]
[--max-wait-time 60]`` sets up a `MooncakeDistributedStore` from a
`MooncakeConfig` (the file, else the environment; ``-D`` overrides fields)
and serves, with aiohttp on <host>:<port>:

* ``PUT /api/put`` (JSON key, value), ``GET /api/get/{key}``,
  ``GET /api/exist/{key}``, ``DELETE /api/remove/{key}``,
  ``DELETE /api/remove_all``;
* ``POST /api/mount_shm`` / ``/api/unmount_shm`` (a /dev/shm file as a
  segment), ``POST /api/mount`` / ``/api/unmount`` (allocated segments),
  ``POST /api/unmount_local_disk``, ``POST /api/reconfigure`` (decode mode
  mounts a file segment, prefill mode unmounts it).

Responses are JSON (``{"status": "success", ...}`` or ``{"error": ...}``)
except a successful GET of a value, which is the raw bytes.

The API has no authentication, so unlike upstream (always 0.0.0.0) it binds
127.0.0.1 by default and a non-loopback ``--host`` needs ``--allow_remote``.
Every file a request names (``mount_shm``'s name, ``reconfigure``'s path)
must be a regular file directly inside ``--segment_dir`` (default
/dev/shm), owned by the service's user; it is opened with O_NOFOLLOW
relative to that directory and mounted through its descriptor, so no
symlink or ``..`` leads out of it (a name that exists nowhere is a failed
mount, ret -1). A store object other than `MooncakeDistributedStore` (a
stand-in, as upstream's tests use) is handed the checked path
``<segment_dir>/<name>`` instead.

SIGINT and SIGTERM (unblocked at start, in case the parent left them blocked)
set the shutdown event: the service stops listening, closes the store and
exits 0.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import ipaddress
import json
import logging
import os
import signal
import stat
import time
from typing import Any

from aiohttp import web

from mooncake.mooncake_config import MooncakeConfig
from mooncake.store import MooncakeDistributedStore

logger = logging.getLogger(__name__)

MAX_BODY = 100 << 20
MAX_GRACE_SECONDS = 3600
DEFAULT_HOST = "127.0.0.1"
DEFAULT_SEGMENT_DIR = "/dev/shm"


def _json(body: dict, status: int = 200) -> web.Response:
    return web.json_response(body, status=status)


def _error(message: str, status: int, **extra: Any) -> web.Response:
    return _json({"error": message, **extra}, status)


def _shm_name_to_path(name: Any) -> str | None:
    """/dev/shm/<name> for a plain shared-memory name; None for anything else."""
    if not isinstance(name, str) or not name:
        return None
    if name.startswith("/"):
        name = name[1:]
    if not name or "/" in name or name in (".", ".."):
        return None
    return f"/dev/shm/{name}"


def is_loopback_host(host: str) -> bool:
    """True for an address that only this host can reach (127.0.0.0/8, ::1, localhost)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_bind_host(host: str, allow_remote: bool) -> None:
    """Refuse to bind a non-loopback `host` unless `allow_remote` (the API is unauthenticated)."""
    if not allow_remote and not is_loopback_host(host):
        raise ValueError(
            f"refusing to bind {host!r}: the REST API has no authentication; "
            "bind a loopback address or pass --allow_remote to serve the network"
        )


class PathRefused(ValueError):
    """A file named by a request lies outside the segment directory, or is no plain file."""


class FileMissing(PathRefused):
    """A file named by a request, inside the segment directory, does not exist."""


def _confined_name(directory: str, path: Any) -> tuple[str, str]:
    """(resolved directory, file name) of `path` when it names an entry directly
    inside `directory`: a plain name, or a path whose parent after lexical
    normalisation is `directory` (as given or resolved). PathRefused otherwise."""
    if not isinstance(path, str) or not path or "\0" in path:
        raise PathRefused("path must be a non-empty string")
    real_dir = os.path.realpath(directory)
    full = os.path.normpath(os.path.join(real_dir, path))
    parent, name = os.path.split(full)
    allowed = (real_dir, os.path.normpath(os.path.abspath(directory)))
    if parent not in allowed or name in ("", ".", ".."):
        raise PathRefused(f"path must name a file directly inside {directory}")
    return real_dir, name


def _check_owned_file(st: os.stat_result, name: str, directory: str) -> None:
    if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
        raise PathRefused(f"{name!r} in {directory} is not a regular file owned by this user")


def open_confined(directory: str, path: Any) -> tuple[int, str]:
    """Open `path` read-write if it names a regular file directly inside `directory`.

    The file is opened relative to the directory with O_NOFOLLOW, so a symlink
    is refused however it got there, and must be a regular file owned by this
    process's user. Returns the descriptor (the caller closes it) and the
    resolved path; raises `FileMissing` when no such file exists, `PathRefused`
    for anything else refused, with nothing opened.
    """
    real_dir, name = _confined_name(directory, path)
    dfd = os.open(real_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        try:
            fd = os.open(name, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NOCTTY, dir_fd=dfd)
        except FileNotFoundError:
            raise FileMissing(f"no file {name!r} in {directory}") from None
        except OSError as e:
            raise PathRefused(f"cannot open {name!r} in {directory}: {e.strerror}") from None
    finally:
        os.close(dfd)
    try:
        _check_owned_file(os.fstat(fd), name, directory)
    except PathRefused:
        os.close(fd)
        raise
    return fd, os.path.join(real_dir, name)


def confined_path(directory: str, path: Any) -> str:
    """``<directory>/<name>`` for a `path` naming an entry directly inside
    `directory` (as `open_confined` checks it) that, when it exists, is a regular
    file owned by this user and not a symlink; PathRefused otherwise. Unlike
    `open_confined` this opens nothing: whoever opens the path later opens what
    is there then."""
    real_dir, name = _confined_name(directory, path)
    dfd = os.open(real_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
    except FileNotFoundError:
        st = None
    finally:
        os.close(dfd)
    if st is not None:
        _check_owned_file(st, name, directory)
    return os.path.join(os.path.normpath(os.path.abspath(directory)), name)


class BadRequest(ValueError):
    """A request body that is not a JSON object; answered 400 with its message."""


async def _json_body(request: Any) -> dict:
    """The JSON object in the body of `request`, read with ``await request.json()`` only.

    An empty body is an empty object (no fields given). A body that is not
    JSON, or JSON other than an object, raises `BadRequest`. A body over the
    app's ``client_max_size`` makes aiohttp raise its 413 while reading.
    """
    try:
        body = await request.json()
    except json.JSONDecodeError as e:
        if e.doc.strip():
            raise BadRequest("Malformed JSON body") from None
        return {}
    except (UnicodeDecodeError, LookupError):  # not text in its charset, or no such charset
        raise BadRequest("Malformed JSON body") from None
    if not isinstance(body, dict):
        raise BadRequest("Request body must be a JSON object")
    return body


def _install_shutdown_signal_handlers(
    loop: asyncio.AbstractEventLoop, event: asyncio.Event
) -> None:
    """Make SIGINT and SIGTERM set `event` on `loop` (loop.add_signal_handler, main thread)."""

    def request_shutdown(signum: int) -> None:
        logger.info("received %s, shutting down", signal.Signals(signum).name)
        event.set()

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, request_shutdown, sig)


def _unblock_shutdown_signals() -> None:
    """Unblock SIGINT and SIGTERM in the calling thread.

    The signal mask is inherited across fork and exec, so a parent that had
    them blocked would leave a SIGTERM pending forever and the service
    unstoppable but by SIGKILL. Called after the handlers are installed, so a
    signal already pending is delivered to them.
    """
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})


def _segment_ids(body: dict) -> list[str]:
    ids = body.get("segment_ids")
    if isinstance(ids, str):
        return [ids] if ids else []
    if isinstance(ids, list):
        return [i for i in ids if i]
    return []


def _is_int(v: Any) -> bool:
    return type(v) is int


def _grace_args(body: dict) -> tuple:
    """The grace period to hand an unmount call: none when the body gives none
    (or 0), so the store's own default applies and a store whose unmount takes
    only the ids (upstream's later service calls it so) works too."""
    grace = body.get("grace_period_seconds", 0)
    return () if grace == 0 else (grace,)


# Config fields with a default: a config object without them (one made for
# an older MooncakeConfig, or a test's namespace) gets the default.
_OPTIONAL_CONFIG = {
    f.name: f.default
    for f in dataclasses.fields(MooncakeConfig)
    if f.default is not dataclasses.MISSING
}


class MooncakeStoreService:
    """The store client and the HTTP handlers of `mc_store_rest_server`.

    The handlers use only ``store``, ``config``, ``segment_dir``,
    ``current_mode``, ``mounted_segment_ids``, ``last_mount_info`` and
    ``_state_lock`` (the asyncio lock around mode and segment-list changes),
    so a service made with ``__new__`` and those set works as one from
    ``__init__``.
    """

    segment_dir: str = DEFAULT_SEGMENT_DIR
    store: Any = None
    _runner: web.AppRunner | None = None

    def __init__(
        self,
        config_path: str | None = None,
        cli_config: dict | None = None,
        segment_dir: str = DEFAULT_SEGMENT_DIR,
    ) -> None:
        try:
            self.config = (
                MooncakeConfig.from_file(config_path)
                if config_path
                else MooncakeConfig.load_from_env()
            )
        except Exception as e:
            logger.error("invalid store service configuration: %s", e)
            raise
        for key, value in (cli_config or {}).items():
            if hasattr(self.config, key):
                setattr(self.config, key, value)
            else:
                logger.warning("ignoring unknown config override %r", key)
        self.segment_dir = segment_dir
        self.store = None
        self.current_mode = "prefill"
        self.mounted_segment_ids: list[str] = []
        self.last_mount_info: dict = {}
        self._state_lock = asyncio.Lock()
        self._runner = None

    # -- lifecycle -------------------------------------------------------------

    def _setup_args(self) -> dict:
        c = self.config

        def opt(name: str) -> Any:
            return getattr(c, name, _OPTIONAL_CONFIG[name])

        return {
            "local_hostname": c.local_hostname,
            "metadata_server": c.metadata_server,
            "global_segment_size": c.global_segment_size,
            "local_buffer_size": c.local_buffer_size,
            "protocol": c.protocol,
            "rdma_devices": c.device_name or "",
            "master_server_addr": c.master_server_address,
            "enable_ssd_offload": opt("enable_ssd_offload"),
            "ssd_offload_path": opt("ssd_offload_path"),
            "tenant_id": opt("tenant_id"),
            "enable_client_http_server": opt("enable_client_http_server"),
            "client_http_port": opt("client_http_port"),
        }

    async def start_store_service(
        self, max_wait_time: float = 60, shutdown_event: asyncio.Event | None = None
    ) -> bool:
        """Set the store up, retrying for up to `max_wait_time` seconds; True when it is.

        Each attempt makes a new module-level `MooncakeDistributedStore` and
        calls its ``setup`` on the event loop's thread; a nonzero return or an
        exception is logged and retried after at most 1 s. `shutdown_event`,
        once set, ends the retry wait at once and makes this return False;
        set while ``setup`` ran, the new store is closed again.
        """
        start = time.monotonic()
        attempt = 0
        if shutdown_event is not None:
            await asyncio.sleep(0)  # run a signal callback queued before we started
        while True:
            if shutdown_event is not None and shutdown_event.is_set():
                logger.info("store startup cancelled by shutdown request")
                return False
            if time.monotonic() - start >= max_wait_time:
                logger.error(
                    "store setup failed %d times in %.1f s; giving up", attempt, max_wait_time
                )
                return False
            attempt += 1
            store = None
            try:
                store = MooncakeDistributedStore()
                rc = store.setup(self._setup_args())
            except Exception as e:
                logger.warning("store setup attempt %d raised: %s", attempt, e)
                rc = None
            if rc == 0:
                self.store = store
                if shutdown_event is not None:
                    await asyncio.sleep(0)  # a signal that came during setup
                    if shutdown_event.is_set():
                        logger.info("store startup cancelled by shutdown request")
                        await self.stop()
                        return False
                return True
            if rc is not None:
                logger.warning("store setup attempt %d failed (%s); retrying", attempt, rc)
            self._discard(store)
            delay = min(1.0, max(0.0, max_wait_time - (time.monotonic() - start)))
            if shutdown_event is None:
                await asyncio.sleep(delay)
            else:
                try:
                    await asyncio.wait_for(shutdown_event.wait(), delay)
                except TimeoutError:
                    pass

    @staticmethod
    def _discard(store: Any) -> None:
        """Close a store whose setup failed (errors only logged)."""
        if store is None:
            return
        try:
            store.close()
        except Exception as e:
            logger.debug("closing a store that failed setup: %s", e)

    async def stop(self) -> None:
        """Stop serving HTTP and close the store; each once, so a second call does nothing."""
        await self.stop_http_service()
        store, self.store = self.store, None
        if store is not None:
            rc = store.close()
            if rc != 0:
                logger.warning("store close returned %s", rc)

    def make_app(self) -> web.Application:
        """The aiohttp app: the routes, with bodies limited to `MAX_BODY` (413 beyond)."""
        app = web.Application(client_max_size=MAX_BODY)
        app.router.add_put("/api/put", self.handle_put)
        app.router.add_get("/api/get/{key}", self.handle_get)
        app.router.add_get("/api/exist/{key}", self.handle_exist)
        app.router.add_delete("/api/remove/{key}", self.handle_remove)
        app.router.add_delete("/api/remove_all", self.handle_remove_all)
        app.router.add_post("/api/mount_shm", self.handle_mount_shm)
        app.router.add_post("/api/unmount_shm", self.handle_unmount_shm)
        app.router.add_post("/api/mount", self.handle_mount)
        app.router.add_post("/api/unmount", self.handle_unmount)
        app.router.add_post("/api/unmount_local_disk", self.handle_unmount_local_disk)
        app.router.add_post("/api/reconfigure", self.handle_reconfigure)
        return app

    async def start_http_service(
        self, port: int = 8080, host: str = DEFAULT_HOST, allow_remote: bool = False
    ) -> bool:
        """Serve on host:port (True once listening); a non-loopback host needs `allow_remote`.

        Raises ValueError for a refused host, before anything listens.
        """
        check_bind_host(host, allow_remote)
        runner = web.AppRunner(self.make_app())
        await runner.setup()
        try:
            await web.TCPSite(runner, host, port).start()
        except BaseException:
            await runner.cleanup()
            raise
        self._runner = runner
        logger.info("mc_store_rest_server listening on %s:%d", host, port)
        return True

    async def stop_http_service(self) -> None:
        """Stop listening and finish the requests in flight (nothing if not serving)."""
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()

    # -- key/value -------------------------------------------------------------

    @staticmethod
    def _guard(fn):
        """Answer a `BadRequest` 400, let aiohttp's HTTP errors (413) through, anything else 500."""

        async def wrapped(self, request: web.Request) -> web.Response:
            try:
                return await fn(self, request)
            except BadRequest as e:
                return _error(str(e), 400)
            except web.HTTPException:
                raise
            except Exception as e:
                logger.exception("request failed")
                return _error(str(e), 500)

        wrapped.__name__ = fn.__name__
        wrapped.__doc__ = fn.__doc__
        return wrapped

    @_guard
    async def handle_put(self, request: web.Request) -> web.Response:
        body = await _json_body(request)
        key, value = body.get("key"), body.get("value")
        if not key:
            return _error("Missing key or value", 400)
        if not isinstance(value, str):  # a missing value too: 500, as upstream answers it
            return _error("value must be a string", 500)
        if await asyncio.to_thread(self.store.put, key, value.encode()) != 0:
            return _error("PUT operation failed", 500)
        return _json({"status": "success"})

    def _exist_error(self, rc: int) -> web.Response | None:
        if rc == 0:
            return _error("Key not found", 404)
        if rc < 0:
            return _error("Exist check failed", 500)
        return None

    @_guard
    async def handle_get(self, request: web.Request) -> web.Response:
        key = request.match_info["key"]
        bad = self._exist_error(await asyncio.to_thread(self.store.is_exist, key))
        if bad is not None:
            return bad
        value = await asyncio.to_thread(self.store.get, key)
        if value is None:
            return _error("GET operation failed", 500)
        if value == b"":
            bad = self._exist_error(await asyncio.to_thread(self.store.is_exist, key))
            if bad is not None:
                return bad
        return web.Response(body=value, content_type="application/octet-stream")

    @_guard
    async def handle_exist(self, request: web.Request) -> web.Response:
        rc = await asyncio.to_thread(self.store.is_exist, request.match_info["key"])
        if rc < 0:
            return _error("Exist check failed", 500)
        return _json({"exists": rc > 0})

    @_guard
    async def handle_remove(self, request: web.Request) -> web.Response:
        if await asyncio.to_thread(self.store.remove, request.match_info["key"]) != 0:
            return _error("Remove operation failed", 500)
        return _json({"status": "success"})

    @_guard
    async def handle_remove_all(self, request: web.Request) -> web.Response:
        n = await asyncio.to_thread(self.store.remove_all)
        if n < 0:
            return _error("RemoveAll operation failed", 500)
        return _json({"status": f"success removed {n} keys"})

    # -- segments --------------------------------------------------------------

    async def _mount(self, path: Any, size: int, offset: int, protocol: str, location: str):
        """Mount `path`, which must name a file directly inside the segment directory.

        Our own store mounts it through a descriptor opened here (O_NOFOLLOW, so
        the file checked is the file mounted); a file that does not exist is a
        failed mount (ret -1), as the store answers for a file it cannot open.
        Any other store object (one that cannot take a descriptor path) gets
        the checked ``<segment_dir>/<name>`` itself, as upstream's service passes
        it. Raises `PathRefused` before touching the store when the path is
        refused (outside the directory, a symlink, not a regular file of ours).
        """
        if not isinstance(self.store, MooncakeDistributedStore):
            plain = confined_path(self.segment_dir, path)
            return await asyncio.to_thread(
                self.store.mount_segment, plain, size, offset, protocol, location
            )
        try:
            fd, _ = open_confined(self.segment_dir, path)
        except FileMissing as e:
            logger.warning("mount_segment: %s", e)
            return {"ret": -1, "segment_ids": []}
        try:
            return await asyncio.to_thread(
                self.store.mount_segment, f"/proc/self/fd/{fd}", size, offset, protocol, location
            )
        finally:
            os.close(fd)

    @_guard
    async def handle_mount_shm(self, request: web.Request) -> web.Response:
        body = await _json_body(request)
        path, size = _shm_name_to_path(body.get("name")), body.get("size")
        if path is None or size is None:
            return _error("Missing or invalid name or size", 400)
        try:
            res = await self._mount(
                path,
                size,
                body.get("offset", 0),
                body.get("protocol", self.config.protocol),
                body.get("location", ""),
            )
        except PathRefused as e:
            return _error(f"Refused name: {e}", 400)
        if res["ret"] != 0:
            return _error(f"Mount failed, ret={res['ret']}", 500)
        return _json({"status": "success", "segment_ids": res["segment_ids"]})

    @_guard
    async def handle_unmount_shm(self, request: web.Request) -> web.Response:
        body = await _json_body(request)
        ids = _segment_ids(body)
        if not ids:
            return _error("Missing segment_ids", 400)
        grace = _grace_args(body)
        failed = []
        async with self._state_lock:
            for sid in ids:
                if await asyncio.to_thread(self.store.unmount_segment, [sid], *grace) != 0:
                    failed.append(sid)
                elif sid in self.mounted_segment_ids:
                    self.mounted_segment_ids.remove(sid)
            if not self.mounted_segment_ids:
                self.current_mode = "prefill"
        if failed:
            return _error("Unmount failed for one or more segments", 500, failed_segment_ids=failed)
        return _json({"status": "success"})

    @_guard
    async def handle_mount(self, request: web.Request) -> web.Response:
        body = await _json_body(request)
        size = body.get("size")
        if not _is_int(size) or size <= 0:
            return _error("Invalid size, must be a positive integer", 400)
        res = await asyncio.to_thread(
            self.store.allocate_and_mount_segment,
            size,
            body.get("protocol", self.config.protocol),
            body.get("location", ""),
        )
        if res["ret"] != 0:
            return _error(f"Allocate and mount failed, ret={res['ret']}", 500)
        return _json(
            {
                "status": "success",
                "segment_ids": res["segment_ids"],
                "allocated_size": res["allocated_size"],
            }
        )

    @_guard
    async def handle_unmount(self, request: web.Request) -> web.Response:
        body = await _json_body(request)
        ids = _segment_ids(body)
        if not ids:
            return _error("Missing segment_ids", 400)
        rc = await asyncio.to_thread(self.store.unmount_and_free_segment, ids, *_grace_args(body))
        if rc != 0:
            return _error(f"Unmount and free failed, ret={rc}", 500)
        return _json({"status": "success"})

    @_guard
    async def handle_unmount_local_disk(self, request: web.Request) -> web.Response:
        body = await _json_body(request)
        grace = body.get("grace_period_seconds", 0)
        if not _is_int(grace) or not 0 <= grace <= MAX_GRACE_SECONDS:
            return _error(
                f"grace_period_seconds must be an integer in [0, {MAX_GRACE_SECONDS}]", 400
            )
        rc = await asyncio.to_thread(self.store.unmount_local_disk_segment, grace)
        if rc != 0:
            return _error(f"Unmount local disk failed, ret={rc}", 500)
        return _json({"status": "success"})

    @_guard
    async def handle_reconfigure(self, request: web.Request) -> web.Response:
        body = await _json_body(request)
        mode = str(body.get("mode", "")).lower()
        if mode not in ("decode", "prefill"):
            return _error("Invalid mode. Use 'decode' or 'prefill'", 400)
        async with self._state_lock:
            if mode == "decode":
                return await self._to_decode(body)
            return await self._to_prefill()

    async def _to_decode(self, body: dict) -> web.Response:
        path, size = body.get("path"), body.get("size")
        if not path or size is None:
            return _error("Missing path or size for decode mode", 400)
        info = {
            "path": path,
            "offset": body.get("offset", 0),
            "size": size,
            "protocol": body.get("protocol", self.config.protocol),
            "location": body.get("location", ""),
        }
        try:
            res = await self._mount(path, size, info["offset"], info["protocol"], info["location"])
        except PathRefused as e:  # nothing was mounted, the mode is unchanged
            return _error(f"Refused path: {e}", 400)
        previous = list(self.mounted_segment_ids)
        if res["ret"] != 0:
            if previous:
                return _error(
                    f"Mount failed, ret={res['ret']}; keeping previous decode segments",
                    500,
                    mode=self.current_mode,
                )
            self.current_mode, self.mounted_segment_ids, self.last_mount_info = "prefill", [], {}
            return _error(
                f"Mount failed, ret={res['ret']}; rolled back to prefill", 500, mode="prefill"
            )
        failed_old = [
            sid
            for sid in previous
            if await asyncio.to_thread(self.store.unmount_segment, [sid]) != 0
        ]
        self.mounted_segment_ids = list(res["segment_ids"]) + failed_old
        self.last_mount_info = info
        self.current_mode = "decode"
        return _json({"status": "success", "mode": "decode", "segment_ids": res["segment_ids"]})

    async def _to_prefill(self) -> web.Response:
        if self.mounted_segment_ids:
            rc = await asyncio.to_thread(self.store.unmount_segment, list(self.mounted_segment_ids))
            if rc != 0:
                return _error(f"Unmount failed, ret={rc}", 500)
        self.mounted_segment_ids, self.last_mount_info = [], {}
        self.current_mode = "prefill"
        return _json({"status": "success", "mode": "prefill"})


def _parse_defines(items: list[str]) -> dict:
    out = {}
    for item in items:
        if "=" not in item:
            logger.warning("ignoring -D %r: expected key=value", item)
            continue
        k, v = item.split("=", 1)
        out[k] = v
    return out


def parse_arguments(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line of `mc_store_rest_server` (`argv`, default sys.argv[1:]).

    Exits 2 for a non-loopback ``--host`` without ``--allow_remote``.
    """
    p = argparse.ArgumentParser(
        prog="mc_store_rest_server", description="A Mooncake store client behind a REST API."
    )
    p.add_argument("--config", help="JSON config file (default: MOONCAKE_* environment)")
    p.add_argument(
        "-D",
        "--define",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config field (repeatable)",
    )
    p.add_argument("--port", type=int, default=8080, help="HTTP port (default 8080)")
    p.add_argument(
        "--host",
        default=DEFAULT_HOST,
        help=f"HTTP bind address (default {DEFAULT_HOST}; upstream binds 0.0.0.0). "
        "The API is unauthenticated: a non-loopback address needs --allow_remote",
    )
    p.add_argument(
        "--allow_remote",
        action="store_true",
        help="allow a non-loopback --host (anyone who reaches the port can put, "
        "remove and mount segments)",
    )
    p.add_argument(
        "--segment_dir",
        default=DEFAULT_SEGMENT_DIR,
        help="the only directory whose files mount_shm and reconfigure may mount "
        f"(default {DEFAULT_SEGMENT_DIR})",
    )
    p.add_argument(
        "--max-wait-time",
        type=float,
        default=60,
        help="seconds to keep retrying store setup (default 60)",
    )
    args = p.parse_args(argv)
    try:
        check_bind_host(args.host, args.allow_remote)
    except ValueError as e:
        p.error(str(e))
    return args


async def main(argv: list[str] | None = None) -> None:
    """Run the service until SIGINT/SIGTERM; the store is closed however it ends.

    The module-level `parse_arguments` and `MooncakeStoreService` are looked
    up at call time. A namespace without ``host``, ``allow_remote`` or
    ``segment_dir`` (upstream's flags only) gets their defaults.
    """
    args = parse_arguments(argv)
    host = getattr(args, "host", DEFAULT_HOST)
    allow_remote = getattr(args, "allow_remote", False)
    service = MooncakeStoreService(
        args.config,
        _parse_defines(args.define),
        segment_dir=getattr(args, "segment_dir", DEFAULT_SEGMENT_DIR),
    )
    shutdown = asyncio.Event()
    _install_shutdown_signal_handlers(asyncio.get_running_loop(), shutdown)
    _unblock_shutdown_signals()
    try:
        if not await service.start_store_service(args.max_wait_time, shutdown):
            if shutdown.is_set():
                return
            raise RuntimeError("Failed to start store service")
        await service.start_http_service(args.port, host, allow_remote)
        await shutdown.wait()
    finally:
        await service.stop()


def sync_main() -> None:
    """Entry point of the ``mc_store_rest_server`` console script."""
    logging.basicConfig(level=logging.INFO)
    asyncio.run(main())
