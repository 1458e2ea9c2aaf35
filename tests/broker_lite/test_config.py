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
    env = {"SPARKLOG_LINGER_MS": "9", "SPARKLOG_STORAGE_OPTIONS": '{"anon": true}'}
    cfg = load_config(path, overrides={"broker_id": 3}, env=env)
    assert (cfg.linger_ms, cfg.listen, cfg.broker_id) == (9, "127.0.0.1:9000", 3)
    assert cfg.storage_options == {"anon": True}


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
    ],
)
def test_bad_values_name_key_and_accepted_values(tmp_path, text, message):
    path = tmp_path / "b.toml"
    path.write_text(text + "\n")
    with pytest.raises(InvalidConfigError, match=message):
        load_config(path, env={})
