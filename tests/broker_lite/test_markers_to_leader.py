"""Transaction markers go to each partition's leader (Kafka's WriteTxnMarkers), and around
it when it cannot take them.

Three brokers writing back-to-back transactions, counted in their journals, are in
tests/kafka/test_transactions.py. Here one in-process broker on a local root stands as the
coordinator, and its view of the cluster is pointed at a leader that is not there (a port
nothing listens on): the only stand-in.
"""

from __future__ import annotations

import logging

import pytest

from sparklog.broker_lite.cluster import BrokerInfo
from sparklog.broker_lite.transactions.markers import end_transactions, write_led_markers
from sparklog.errors import InvalidRequestError, NotLeaderOrFollowerError
from sparklog.storage.txn_markers import Marker
from tests.chaos.inproc import inproc_broker

NOWHERE = BrokerInfo(99, "127.0.0.1:1", 0)


def test_markers_for_a_leader_that_cannot_be_reached_are_written_around_it(
    tmp_path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The leader named by the cluster is gone (its port refuses): the coordinator writes
    the markers into the shard log itself, as before markers went to leaders, and the
    transaction ends in the partition (idempotent: written again, nothing changes)."""
    with inproc_broker(f"file://{tmp_path}/root") as (server, _):
        broker = server.broker
        broker.create_topic("t", 2)
        cluster = broker.state.cluster
        assert cluster is not None
        monkeypatch.setattr(cluster, "shard_leader", lambda topic, shard: NOWHERE)
        ends = {0: Marker(7, 0, 3, True), 1: Marker(7, 0, 3, True)}
        with caplog.at_level(logging.INFO, "sparklog.broker_lite.transactions"):
            assert end_transactions(broker.state, "t", ends) == {0: -1, 1: -1}
        assert any("written to the shard log directly" in r.message for r in caplog.records)
        for p in (0, 1):
            txn = broker.state.partition_state(broker.state.topic("t"), p).log.state.transactions
            assert int(txn["closed"]["7"]) == 3
        assert end_transactions(broker.state, "t", ends) == {0: -1, 1: -1}


def test_a_broker_takes_markers_only_for_partitions_it_leads(
    tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with inproc_broker(f"file://{tmp_path}/root") as (server, _):
        broker = server.broker
        broker.create_topic("t", 2)
        one = [[0, 7, 0, 1, False]]
        assert write_led_markers(broker.state, "t", one) == {"0": -1}
        with pytest.raises(InvalidRequestError, match="accepted"):
            write_led_markers(broker.state, "t", [[0, "seven"]])
        cluster = broker.state.cluster
        assert cluster is not None
        monkeypatch.setattr(cluster, "is_leader", lambda topic, partition: False)
        with pytest.raises(NotLeaderOrFollowerError, match="does not lead"):
            write_led_markers(broker.state, "t", one)


def test_a_broker_calls_peers_that_ask_for_users_only_as_inter_broker_user(tmp_path) -> None:
    """A cluster whose Flight listeners ask for users: without inter_broker_user each call
    would be a failed login (delayed and logged by the peer), so none is made and markers
    are written around the leader; with it, calls go as that user."""
    from sparklog.broker_lite.config import load_config
    from sparklog.broker_lite.peers import Peers

    base = {"root": f"file://{tmp_path}/root", "listen": "127.0.0.1:0"}
    assert Peers(load_config(None, base)).can_log_in
    sasl = {**base, "flight_security_protocol": "SASL_PLAINTEXT"}
    assert not Peers(load_config(None, sasl)).can_log_in
    user = {**sasl, "inter_broker_user": "broker", "inter_broker_password": "secret"}
    assert Peers(load_config(None, user)).can_log_in
    with pytest.raises(Exception, match="inter_broker_password"):
        load_config(None, {**sasl, "inter_broker_user": "broker"})
