"""mooncake.mooncake_config: MooncakeConfig, its parsers, file and environment loading."""

from __future__ import annotations

import json
import logging

import pytest

from mooncake import mooncake_config as mc
from mooncake.mooncake_config import MooncakeConfig, _parse_bool, _parse_segment_size

ENV_VARS = (
    "MOONCAKE_CONFIG_PATH",
    "MOONCAKE_MASTER",
    "MOONCAKE_LOCAL_HOSTNAME",
    "MOONCAKE_TE_META_DATA_SERVER",
    "MOONCAKE_GLOBAL_SEGMENT_SIZE",
    "MOONCAKE_LOCAL_BUFFER_SIZE",
    "MOONCAKE_PROTOCOL",
    "MOONCAKE_DEVICE",
    "MOONCAKE_OFFLOAD_ENABLED",
    "MOONCAKE_OFFLOAD_FILE_STORAGE_PATH",
    "MOONCAKE_TENANT_ID",
    "MOONCAKE_ENABLE_CLIENT_HTTP_SERVER",
    "MOONCAKE_CLIENT_HTTP_PORT",
)


@pytest.fixture
def clean_env(monkeypatch):
    for name in ENV_VARS:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def write(tmp_path, doc) -> str:
    p = tmp_path / "mooncake.json"
    p.write_text(json.dumps(doc))
    return str(p)


BASE = {
    "local_hostname": "127.0.0.1",
    "metadata_server": "http://127.0.0.1:8080/metadata",
    "master_server_address": "127.0.0.1:50051",
}


@pytest.mark.parametrize(
    "text,expected",
    [
        ("1.5kb", 1536),
        ("  3 gb  ", 3 << 30),
        ("4096B", 4096),
        ("2K", 2048),
        ("1m", 1 << 20),
        ("1T", 1 << 40),
        ("1tb", 1 << 40),
        ("1.5", 1),
        ("1e9", 1000000000),
        ("512", 512),
    ],
)
def test_size_strings(text, expected):
    assert _parse_segment_size(text) == expected


def test_size_non_strings():
    assert _parse_segment_size(7) == 7
    assert _parse_segment_size(True) is True  # ints (bool included) pass through
    assert _parse_segment_size(1.5) == 1


@pytest.mark.parametrize("text", ["", "   ", "gb", "mb", "abc", "50%", "1.2.3mb"])
def test_bad_size_strings(text):
    with pytest.raises(ValueError):
        _parse_segment_size(text)


def test_size_null_is_type_error():
    with pytest.raises(TypeError):
        _parse_segment_size(None)


@pytest.mark.parametrize("v", ["true", " YES ", "1", "on", "enable", "True", 1, 2.0, True])
def test_bool_true(v):
    assert _parse_bool(v) is True


@pytest.mark.parametrize("v", ["false", "0", "no", "OFF", "disable", "", None, 0, False])
def test_bool_false(v):
    assert _parse_bool(v) is False


def test_bool_garbage():
    with pytest.raises(ValueError, match="Invalid boolean value"):
        _parse_bool("notabool")


def make(**over):
    fields = dict(
        local_hostname="h",
        metadata_server="m",
        global_segment_size=1,
        local_buffer_size=1,
        protocol="tcp",
        device_name=None,
        master_server_address="a:1",
    )
    fields.update(over)
    return MooncakeConfig(**fields)


def test_defaults_and_constants():
    c = make()
    assert (c.enable_ssd_offload, c.ssd_offload_path, c.tenant_id) == (False, "", "default")
    assert (c.enable_client_http_server, c.client_http_port) == (False, 9300)
    assert mc.DEFAULT_GLOBAL_SEGMENT_SIZE == 3355443200
    assert mc.DEFAULT_LOCAL_BUFFER_SIZE == 1 << 30


@pytest.mark.parametrize("proto", [None, "", "   "])
def test_invalid_protocol(proto):
    with pytest.raises(ValueError, match="Invalid protocol"):
        make(protocol=proto)


def test_protocol_normalised_and_unknown_warns(caplog):
    caplog.set_level(logging.WARNING, logger=mc.logger.name)
    assert make(protocol=" RDMA ").protocol == "rdma"
    assert make(protocol="tcp").protocol == "tcp"
    assert not caplog.records  # known protocols log nothing
    c = make(protocol="Foo")
    assert c.protocol == "foo"
    assert [r.name for r in caplog.records] == ["mooncake.mooncake_config"]
    assert "Unrecognised protocol" in caplog.records[0].getMessage()


@pytest.mark.parametrize("field", ["global_segment_size", "local_buffer_size"])
def test_negative_sizes(field):
    with pytest.raises(ValueError, match=field):
        make(**{field: -1})
    assert getattr(make(**{field: 0}), field) == 0


@pytest.mark.parametrize("field", ["local_hostname", "metadata_server", "master_server_address"])
def test_empty_required_strings(field):
    with pytest.raises(ValueError, match=field):
        make(**{field: "  "})


def test_from_file_full(tmp_path):
    doc = dict(
        BASE,
        global_segment_size="1.5kb",
        local_buffer_size=4096,
        protocol="RDMA",
        device_name="mlx5_0",
        enable_ssd_offload="yes",
        ssd_offload_path=None,
        tenant_id=7,
        enable_client_http_server="on",
        client_http_port="19444",
    )
    c = MooncakeConfig.from_file(write(tmp_path, doc))
    assert c.global_segment_size == 1536 and c.local_buffer_size == 4096
    assert c.protocol == "rdma" and c.device_name == "mlx5_0"
    assert c.enable_ssd_offload is True and c.ssd_offload_path == ""
    assert c.tenant_id == "7" and c.enable_client_http_server is True
    assert c.client_http_port == 19444


def test_from_file_defaults(tmp_path):
    c = MooncakeConfig.from_file(write(tmp_path, BASE))
    assert c.global_segment_size == mc.DEFAULT_GLOBAL_SEGMENT_SIZE
    assert c.local_buffer_size == mc.DEFAULT_LOCAL_BUFFER_SIZE
    assert (c.protocol, c.device_name, c.tenant_id) == ("tcp", "", "default")


@pytest.mark.parametrize("missing", ["local_hostname", "metadata_server", "master_server_address"])
def test_from_file_missing_field(tmp_path, missing):
    doc = {k: v for k, v in BASE.items() if k != missing}
    with pytest.raises(ValueError, match=f"Missing required config field: {missing}"):
        MooncakeConfig.from_file(write(tmp_path, doc))


def test_from_file_bad_values(tmp_path):
    with pytest.raises(ValueError):
        MooncakeConfig.from_file(write(tmp_path, dict(BASE, global_segment_size="gb")))
    with pytest.raises(TypeError):
        MooncakeConfig.from_file(write(tmp_path, dict(BASE, local_buffer_size=None)))
    with pytest.raises(ValueError, match="Invalid boolean"):
        MooncakeConfig.from_file(write(tmp_path, dict(BASE, enable_ssd_offload="notabool")))
    with pytest.raises(ValueError, match="local_hostname"):
        MooncakeConfig.from_file(write(tmp_path, dict(BASE, local_hostname="")))


def test_env_requires_master(clean_env):
    with pytest.raises(ValueError) as e:
        MooncakeConfig.load_from_env()
    assert str(e.value) == (
        "Neither the environment variable 'MOONCAKE_CONFIG_PATH' nor 'MOONCAKE_MASTER' is set."
    )
    clean_env.setenv("MOONCAKE_MASTER", "")
    with pytest.raises(ValueError, match="Neither"):
        MooncakeConfig.load_from_env()


def test_env_defaults(clean_env):
    clean_env.setenv("MOONCAKE_MASTER", "127.0.0.1:50051")
    clean_env.setenv("LOCAL_HOSTNAME", "elsewhere")  # not read (upstream reads MOONCAKE_ ...)
    c = MooncakeConfig.load_from_env()
    assert c.local_hostname == "localhost"
    assert c.metadata_server == "P2PHANDSHAKE"
    assert c.global_segment_size == 3355443200 and c.local_buffer_size == 1 << 30
    assert (c.protocol, c.device_name, c.master_server_address) == ("tcp", "", "127.0.0.1:50051")
    assert (c.enable_ssd_offload, c.ssd_offload_path, c.tenant_id) == (False, "", "default")
    assert (c.enable_client_http_server, c.client_http_port) == (False, 9300)


def _own_ipv4() -> str | None:
    """One of this host's global IPv4 addresses (iproute2), or None."""
    import shutil
    import subprocess

    if not shutil.which("ip"):
        return None
    out = subprocess.run(["ip", "-4", "-o", "addr", "show", "scope", "global"],
                         capture_output=True, text=True).stdout  # fmt: skip
    for line in out.splitlines():
        fields = line.split()
        if "inet" in fields:
            return fields[fields.index("inet") + 1].split("/")[0]
    return None


def test_env_default_hostname_routable_with_remote_master(clean_env):
    """Without MOONCAKE_LOCAL_HOSTNAME and with a master on another address,
    the client names itself by the local address of the route to the master
    (was "localhost", which no other host reaches)."""
    own = _own_ipv4()
    if own is None:
        pytest.skip("no global IPv4 address")
    clean_env.setenv("MOONCAKE_MASTER", f"{own}:50051")
    assert MooncakeConfig.load_from_env().local_hostname == own
    clean_env.setenv("MOONCAKE_MASTER", f"etcd://{own}:2379;10.9.9.9:2379")
    assert MooncakeConfig.load_from_env().local_hostname == own
    clean_env.setenv("MOONCAKE_MASTER", "localhost:50051")
    assert MooncakeConfig.load_from_env().local_hostname == "localhost"


def test_master_host():
    assert mc._master_host("10.0.0.1:50051") == "10.0.0.1"
    assert mc._master_host("[fd00::1]:50051") == "fd00::1"
    assert mc._master_host("etcd://http://10.0.0.2:2379,10.0.0.3:2379") == "10.0.0.2"
    assert mc._master_host("master") == "master"
    assert mc._master_host("redis://10.0.0.5:6379/") == "10.0.0.5"
    assert mc._master_host("redis://[fd00::2]:6379") == "fd00::2"


def test_env_values(clean_env):
    for k, v in {
        "MOONCAKE_MASTER": "10.0.0.1:1",
        "MOONCAKE_LOCAL_HOSTNAME": "node1",
        "MOONCAKE_TE_META_DATA_SERVER": "http://m:8080/metadata",
        "MOONCAKE_GLOBAL_SEGMENT_SIZE": "2gb",
        "MOONCAKE_LOCAL_BUFFER_SIZE": "512 MB",
        "MOONCAKE_PROTOCOL": "TCP",
        "MOONCAKE_DEVICE": "erdma_0",
        "MOONCAKE_OFFLOAD_ENABLED": "True",
        "MOONCAKE_OFFLOAD_FILE_STORAGE_PATH": "/data/x",
        "MOONCAKE_TENANT_ID": "t1",
        "MOONCAKE_ENABLE_CLIENT_HTTP_SERVER": "1",
        "MOONCAKE_CLIENT_HTTP_PORT": "19000",
    }.items():
        clean_env.setenv(k, v)
    c = MooncakeConfig.load_from_env()
    assert c == MooncakeConfig(
        "node1",
        "http://m:8080/metadata",
        2 << 30,
        512 << 20,
        "tcp",
        "erdma_0",
        "10.0.0.1:1",
        True,
        "/data/x",
        "t1",
        True,
        19000,
    )


def test_env_bad_size(clean_env):
    clean_env.setenv("MOONCAKE_MASTER", "a:1")
    clean_env.setenv("MOONCAKE_LOCAL_BUFFER_SIZE", "50%")
    with pytest.raises(ValueError):
        MooncakeConfig.load_from_env()


def test_config_path_wins_over_env(clean_env, tmp_path):
    clean_env.setenv("MOONCAKE_MASTER", "from-env:1")
    clean_env.setenv("MOONCAKE_CONFIG_PATH", write(tmp_path, BASE))
    assert MooncakeConfig.load_from_env().master_server_address == "127.0.0.1:50051"
    clean_env.setenv("MOONCAKE_CONFIG_PATH", "")  # set but empty: still the file path
    with pytest.raises(FileNotFoundError):
        MooncakeConfig.load_from_env()


def test_config_sets_up_a_store(clean_env, store_master):
    """A config loaded from the environment sets a real client up."""
    from mooncake.store import MooncakeDistributedStore

    clean_env.setenv("MOONCAKE_MASTER", store_master.rpc)
    clean_env.setenv("MOONCAKE_LOCAL_HOSTNAME", "127.0.0.1")
    clean_env.setenv("MOONCAKE_TE_META_DATA_SERVER", store_master.metadata_url)
    clean_env.setenv("MOONCAKE_GLOBAL_SEGMENT_SIZE", "16mb")
    clean_env.setenv("MOONCAKE_LOCAL_BUFFER_SIZE", "4 MB")
    c = MooncakeConfig.load_from_env()
    s = MooncakeDistributedStore()
    try:
        rc = s.setup(
            c.local_hostname,
            c.metadata_server,
            c.global_segment_size,
            c.local_buffer_size,
            c.protocol,
            c.device_name,
            c.master_server_address,
        )
        assert rc == 0
        assert s.put("cfg-key", b"v") == 0
        assert s.get("cfg-key") == b"v"
    finally:
        s.close()
