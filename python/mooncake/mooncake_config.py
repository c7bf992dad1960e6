"""mooncake.mooncake_config: a store client's settings, from a JSON file or the environment.

`MooncakeConfig` holds what `MooncakeDistributedStore.setup` needs, with
upstream's field names, defaults and validation. `MooncakeConfig.from_file`
reads a JSON file; `MooncakeConfig.load_from_env` reads the file named by
``MOONCAKE_CONFIG_PATH`` or, without it, the ``MOONCAKE_*`` variables.
Sizes may be integers or strings such as ``"3.125GB"`` or ``"512 mb"``
(1024-based; see `_parse_segment_size`).
"""

from __future__ import annotations

import ipaddress
import json
import logging
import os
import socket
from dataclasses import dataclass
from typing import Any

logger = logging.getLogger(__name__)

DEFAULT_GLOBAL_SEGMENT_SIZE = 3355443200  # 3.125 GiB
DEFAULT_LOCAL_BUFFER_SIZE = 1073741824  # 1 GiB

KNOWN_PROTOCOLS = frozenset(
    {
        "tcp",
        "rdma",
        "efa",
        "nvmeof",
        "nvlink",
        "musa",
        "nvlink_intra",
        "hip",
        "barex",
        "cxl",
        "ascend",
        "ub",
        "ubshmem",
        "maca",
        "sunrise_link",
        "rpc_only",
    }
)

# Suffixes in the order they are tried (two-letter ones first, so "kb" is
# not read as "b").
_SIZE_SUFFIXES = (
    ("kb", 1 << 10),
    ("mb", 1 << 20),
    ("gb", 1 << 30),
    ("tb", 1 << 40),
    ("k", 1 << 10),
    ("m", 1 << 20),
    ("g", 1 << 30),
    ("t", 1 << 40),
    ("b", 1),
)

_TRUE = frozenset({"true", "1", "yes", "on", "enable"})
_FALSE = frozenset({"false", "0", "no", "off", "disable"})

_REQUIRED_FIELDS = ("local_hostname", "metadata_server", "master_server_address")


def _parse_segment_size(value: Any) -> int:
    """A size in bytes from an int, a float (truncated) or a string like "1.5kb".

    Ints are returned unchanged. Strings are case-insensitive, may carry
    blanks, and take the suffixes kb/mb/gb/tb, k/m/g/t (1024-based) or b;
    without a suffix the number is read as a float and truncated. An empty
    string, a suffix without a number, or anything unparseable is a
    ValueError.
    """
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return int(value)
    if not isinstance(value, str):
        return int(value)
    s = value.strip().lower()
    if not s:
        raise ValueError("size string is empty")
    for suffix, mult in _SIZE_SUFFIXES:
        if s.endswith(suffix):
            number = s[: -len(suffix)].strip()
            if not number:
                raise ValueError(f"size {value!r} has a unit but no number")
            return int(float(number) * mult)
    return int(float(s))


def _parse_bool(value: Any) -> bool:
    """A boolean from a bool, a number, None (False) or a word (true/yes/on/enable/1, ...)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)):
        return bool(value)
    if value is None:
        return False
    s = str(value).strip().lower()
    if s == "" or s in _FALSE:
        return False
    if s in _TRUE:
        return True
    raise ValueError(f"Invalid boolean value: {value!r}")


@dataclass
class MooncakeConfig:
    """Settings of a store client (upstream `mooncake.mooncake_config.MooncakeConfig`)."""

    local_hostname: str
    metadata_server: str
    global_segment_size: int
    local_buffer_size: int
    protocol: str
    device_name: str | None
    master_server_address: str
    enable_ssd_offload: bool = False
    ssd_offload_path: str = ""
    tenant_id: str = "default"
    enable_client_http_server: bool = False
    client_http_port: int = 9300

    def __post_init__(self) -> None:
        if not isinstance(self.protocol, str) or not self.protocol.strip():
            raise ValueError(f"Invalid protocol: {self.protocol!r}")
        self.protocol = self.protocol.strip().lower()
        if self.protocol not in KNOWN_PROTOCOLS:
            logger.warning(
                "Unrecognised protocol %r (known: %s); passing it through",
                self.protocol,
                ", ".join(sorted(KNOWN_PROTOCOLS)),
            )
        for name in ("global_segment_size", "local_buffer_size"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must not be negative, got {getattr(self, name)}")
        for name in _REQUIRED_FIELDS:
            v = getattr(self, name)
            if not isinstance(v, str) or not v.strip():
                raise ValueError(f"{name} must be a non-empty string, got {v!r}")

    @staticmethod
    def from_file(file_path: str) -> MooncakeConfig:
        """Read a JSON config file; a missing required field is a ValueError."""
        with open(file_path) as f:
            config = json.load(f)
        for name in _REQUIRED_FIELDS:
            if name not in config:
                raise ValueError(f"Missing required config field: {name}")

        def text(key: str, default: str) -> str:
            v = config.get(key)
            return default if v is None else str(v)

        return MooncakeConfig(
            local_hostname=config["local_hostname"],
            metadata_server=config["metadata_server"],
            global_segment_size=_parse_segment_size(
                config.get("global_segment_size", DEFAULT_GLOBAL_SEGMENT_SIZE)
            ),
            local_buffer_size=_parse_segment_size(
                config.get("local_buffer_size", DEFAULT_LOCAL_BUFFER_SIZE)
            ),
            protocol=config.get("protocol", "tcp"),
            device_name=config.get("device_name", ""),
            master_server_address=config["master_server_address"],
            enable_ssd_offload=_parse_bool(config.get("enable_ssd_offload", False)),
            ssd_offload_path=text("ssd_offload_path", ""),
            tenant_id=text("tenant_id", "default"),
            enable_client_http_server=_parse_bool(config.get("enable_client_http_server", False)),
            client_http_port=int(config.get("client_http_port", 9300)),
        )

    @staticmethod
    def load_from_env() -> MooncakeConfig:
        """The file named by MOONCAKE_CONFIG_PATH, else the MOONCAKE_* variables.

        Without MOONCAKE_CONFIG_PATH, MOONCAKE_MASTER must be set and non-empty.
        MOONCAKE_LOCAL_HOSTNAME defaults to `default_local_hostname` of the
        master.
        """
        path = os.getenv("MOONCAKE_CONFIG_PATH")
        if path is not None:
            return MooncakeConfig.from_file(path)
        master = os.getenv("MOONCAKE_MASTER")
        if not master:
            raise ValueError(
                "Neither the environment variable 'MOONCAKE_CONFIG_PATH' "
                "nor 'MOONCAKE_MASTER' is set."
            )
        env = os.getenv
        return MooncakeConfig(
            local_hostname=env("MOONCAKE_LOCAL_HOSTNAME") or default_local_hostname(master),
            metadata_server=env("MOONCAKE_TE_META_DATA_SERVER", "P2PHANDSHAKE"),
            global_segment_size=_parse_segment_size(
                env("MOONCAKE_GLOBAL_SEGMENT_SIZE", DEFAULT_GLOBAL_SEGMENT_SIZE)
            ),
            local_buffer_size=_parse_segment_size(
                env("MOONCAKE_LOCAL_BUFFER_SIZE", DEFAULT_LOCAL_BUFFER_SIZE)
            ),
            protocol=env("MOONCAKE_PROTOCOL", "tcp"),
            device_name=env("MOONCAKE_DEVICE", ""),
            master_server_address=master,
            enable_ssd_offload=_parse_bool(env("MOONCAKE_OFFLOAD_ENABLED", "false")),
            ssd_offload_path=env("MOONCAKE_OFFLOAD_FILE_STORAGE_PATH", ""),
            tenant_id=env("MOONCAKE_TENANT_ID", "default"),
            enable_client_http_server=_parse_bool(
                env("MOONCAKE_ENABLE_CLIENT_HTTP_SERVER", "false")
            ),
            client_http_port=int(env("MOONCAKE_CLIENT_HTTP_PORT", "9300")),
        )


def _master_host(master: str) -> str:
    """The host (no port) of a master address: "host:port", "[v6]:port",
    "etcd://h1:p1;h2:p2" (the first endpoint's host), or "redis://host:port"
    (the Redis server's host)."""
    addr = master.strip()
    if addr.startswith("redis://"):
        addr = addr[len("redis://") :].removesuffix("/")
    if addr.startswith("etcd://"):
        eps = [e for e in addr[len("etcd://") :].replace(",", ";").split(";") if e]
        addr = eps[0] if eps else ""
        for scheme in ("http://", "https://"):
            addr = addr.removeprefix(scheme)
    if addr.startswith("["):
        return addr[1:].split("]", 1)[0]
    if addr.count(":") == 1:
        return addr.split(":", 1)[0]
    return addr


def _is_local(host: str) -> bool:
    if host in ("", "localhost"):
        return True
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return False
    return ip.is_loopback or ip.is_unspecified


def default_local_hostname(master: str) -> str:
    """The store client's name when MOONCAKE_LOCAL_HOSTNAME is unset:
    "localhost" with a loopback master (a one-host run), else the local
    address of the route to the master, which the master's other clients
    reach (found without sending a packet). When no route is found it is
    "localhost", which setup then refuses, naming MOONCAKE_LOCAL_HOSTNAME."""
    host = _master_host(master)
    if _is_local(host):
        return "localhost"
    try:
        family = socket.getaddrinfo(host, 9, type=socket.SOCK_DGRAM)[0]
        with socket.socket(family[0], socket.SOCK_DGRAM) as s:
            s.connect(family[4])
            return s.getsockname()[0]
    except OSError as e:
        logger.warning("no route to the master %s (%s): MOONCAKE_LOCAL_HOSTNAME is needed", host, e)
        return "localhost"
