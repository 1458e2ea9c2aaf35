"""Broker config: every key documented with its default; env overrides; clear errors."""

from __future__ import annotations

import pathlib

import pytest

from sparklog.broker_lite.config import KEYS, BrokerConfig, load_config
from sparklog.errors import InvalidConfigError

CONF = pathlib.Path(__file__).resolve().parents[2] / "conf" / "broker.toml"


def test_conf_file_documents_every_key_with_its_default():
    assert load_config(CONF, env={}) == BrokerConfig()
    text = CONF.read_text()
    for name in KEYS:
        assert f"\n{name} = " in text, f"{name} is not in conf/broker.toml"


def test_env_overrides_file_and_overrides_win(tmp_path):
    path = tmp_path / "b.toml"
    path.write_text('linger_ms = 7\nlisten = "127.0.0.1:9000"\n')
    env = {
        "SPARKLOG_LINGER_MS": "9",
        "SPARKLOG_STORAGE_ANON": "true",
        "SPARKLOG_STORAGE_CLIENT_KWARGS__ENDPOINT_URL": "http://127.0.0.1:9",
    }
    cfg = load_config(path, overrides={"broker_id": 3}, env=env)
    assert (cfg.linger_ms, cfg.listen, cfg.broker_id) == (9, "127.0.0.1:9000", 3)
    assert cfg.storage_options == {
        "anon": True,
        "client_kwargs": {"endpoint_url": "http://127.0.0.1:9"},
    }


def test_storage_options_have_one_spelling_everywhere(tmp_path, monkeypatch):
    """The broker, the clients' address and open_root read SPARKLOG_STORAGE_<KEY>; the
    broker's former SPARKLOG_STORAGE_OPTIONS is refused by each, naming the right one."""
    from sparklog.errors import ConfigError
    from sparklog.storage import open_root
    from sparklog.storage_options import storage_options_from_env

    env = {"SPARKLOG_STORAGE_CLIENT_KWARGS__REGION_NAME": "eu-west-1"}
    assert load_config(None, env=env).storage_options == storage_options_from_env(env)
    monkeypatch.setenv("SPARKLOG_STORAGE_CLIENT_KWARGS__REGION_NAME", "eu-west-1")
    assert open_root(f"{tmp_path}/r").store.storage_options == {
        "client_kwargs": {"region_name": "eu-west-1"}
    }
    monkeypatch.setenv("SPARKLOG_STORAGE_OPTIONS", '{"anon": true}')
    for call in (
        lambda: load_config(None),
        lambda: open_root(f"{tmp_path}/r"),
        storage_options_from_env,
    ):
        with pytest.raises(ConfigError, match="SPARKLOG_STORAGE_<KEY>") as err:
            call()
        assert "SPARKLOG_STORAGE_OPTIONS is not read" in str(err.value)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "linger_ms = -1",
            r"config key 'linger_ms'=-1 \(from .*b.toml\).*accepted: an integer >= 0",
        ),
        ('listen = "nowhere"', "'listen'='nowhere'.*accepted: HOST:PORT"),
        ('log_level = "LOUD"', "'log_level'='LOUD'.*accepted: DEBUG, INFO, WARNING, ERROR"),
        ("lingerms = 1", "unknown config key 'lingerms'.*accepted: root"),
        ("lease_timeout_ms = 10\nlease_interval_ms = 20", "lease_timeout_ms"),
        ("linger_ms = ", "not valid TOML"),
        (
            "cleaner_first_pass_spread_ms = 90000000",
            r"'cleaner_first_pass_spread_ms'=90000000 .*accepted: an integer >= 0 and <= 86400000",
        ),
    ],
)
def test_bad_values_name_key_and_accepted_values(tmp_path, text, message):
    path = tmp_path / "b.toml"
    path.write_text(text + "\n")
    with pytest.raises(InvalidConfigError, match=message):
        load_config(path, env={})
