"""Where a Kafka transaction's time goes: transactional against idempotent produce.

For each broker ``linger_ms`` given (default: the broker default 5, and 0), one
broker process on a local root; confluent-kafka produces ``--records`` 100-byte
records with an idempotent producer, then with a transactional one committing
every ``--txn-size`` records (issue 25's benchmark, as ``bench/kafka_bench.py``
runs it).  Printed: both rates and their ratio (target >= 0.7), the milliseconds
per transaction beyond the idempotent path's time for the same records, and the
broker's own mean time per request of the APIs a transaction uses during the
transactional run (``sparklog_kafka_request_seconds`` from its metrics endpoint):
what the transaction waits for, one round trip at a time.

    .venv/bin/python bench/txn_bench.py --records 100000 --linger-ms 5,0
    .venv/bin/python bench/txn_bench.py --records 100000 --txn-size 10000 --brokers 1,3

``--brokers`` runs the same on clusters of that many brokers on one root (issue 36:
no refusal on a healthy cluster; the topics' shards spread over every broker, so
most of a transaction's partitions are led by brokers other than its coordinator).

Also printed: the cluster metadata log's versions written per transaction of the
transactional run (a request count, whatever the machine's load: each is a PUT every
broker then reads; issue 37 item 4b took a transaction's state out of that log).
"""

from __future__ import annotations

import argparse
import re
import signal
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.kafka_bench import (
    _free_port,
    kafka_produce_idempotent,
    kafka_produce_transactional,
    start_broker,
)
from sparklog import Admin
from sparklog.client.transports.flight_client import BrokerClient
from sparklog.protocol import actions

APIS = ("AddPartitionsToTxn", "Produce", "EndTxn")


def _api_seconds(metrics_url: str) -> dict[str, tuple[float, float]]:
    """api -> (requests, seconds) so far."""
    text = urllib.request.urlopen(metrics_url, timeout=10).read().decode()
    out: dict[str, list[float]] = {}
    for kind, api, value in re.findall(
        r'sparklog_kafka_request_seconds_(count|sum)\{api="(\w+)"\} (\S+)', text
    ):
        out.setdefault(api, [0.0, 0.0])[0 if kind == "count" else 1] = float(value)
    return {api: (n, s) for api, (n, s) in out.items()}


def _api_seconds_of(urls: list[str]) -> dict[str, tuple[float, float]]:
    """api -> (requests, seconds) so far, summed over the brokers."""
    total: dict[str, tuple[float, float]] = {}
    for url in urls:
        for api, (n, s) in _api_seconds(url).items():
            was = total.get(api, (0.0, 0.0))
            total[api] = (was[0] + n, was[1] + s)
    return total


def _metadata_versions(root: Path) -> int:
    """How many versions the root's cluster metadata log holds (a local root)."""
    return len(list((root / "cluster/metadata/log").glob("*.json")))


def run(
    linger_ms: int, records: int, txn_size: int, warm_up: int, brokers: int = 1
) -> dict[str, float]:
    work = Path(tempfile.mkdtemp(prefix="sparklog-txn-bench-"))
    procs, urls, addresses, bootstraps = [], [], [], []
    for broker_id in range(1, brokers + 1):
        metrics_port = _free_port()
        proc, address, bootstrap = start_broker(
            f"file://{work}/root",
            work / f"broker-{broker_id}.log",
            {
                "SPARKLOG_LINGER_MS": str(linger_ms),
                "SPARKLOG_METRICS_LISTEN": f"127.0.0.1:{metrics_port}",
            },
            broker_id=broker_id,
        )
        procs.append(proc)
        urls.append(f"http://127.0.0.1:{metrics_port}/metrics")
        addresses.append(address.removeprefix("sparklog://"))
        bootstraps.append(bootstrap)
    address = "sparklog://" + ",".join(addresses)
    bootstrap = ",".join(bootstraps)
    try:
        # topics made once every broker is live: their shards spread over all of them
        with BrokerClient(",".join(addresses)) as client:
            while len(client.call(actions.DESCRIBE_CLUSTER)["brokers"]) < brokers:
                time.sleep(0.1)
        with Admin(address) as admin:
            for name in ("idem-warm-up", "txn-warm-up", "idempotent", "transactional"):
                admin.create_topic(f"bench-{name}", 4)
        kafka_produce_idempotent(bootstrap, "bench-idem-warm-up", warm_up)
        kafka_produce_transactional(bootstrap, "bench-txn-warm-up", warm_up, txn_size)
        idempotent = kafka_produce_idempotent(bootstrap, "bench-idempotent", records)
        before = _api_seconds_of(urls)
        versions = _metadata_versions(work / "root")
        transactional = kafka_produce_transactional(
            bootstrap, "bench-transactional", records, txn_size
        )
        appends = _metadata_versions(work / "root") - versions
        after = _api_seconds_of(urls)
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        for proc in procs:
            proc.wait(timeout=60)
    result = {
        "idempotent": idempotent,
        "transactional": transactional,
        "metadata appends/txn": appends / (records / txn_size),
    }
    for api in APIS:
        n = after.get(api, (0, 0))[0] - before.get(api, (0, 0))[0]
        s = after.get(api, (0, 0))[1] - before.get(api, (0, 0))[1]
        result[f"{api} requests"] = n
        result[f"{api} ms"] = 1000 * s / n if n else float("nan")
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--txn-size", type=int, default=1_000)
    parser.add_argument("--warm-up", type=int, default=10_000)
    parser.add_argument(
        "--linger-ms", default="5,0", help="broker linger_ms values, comma-separated"
    )
    parser.add_argument(
        "--brokers", default="1", help="cluster sizes on one root, comma-separated (e.g. 1,3)"
    )
    args = parser.parse_args()
    transactions = args.records / args.txn_size
    print(f"records: {args.records:,} x 100 B, {args.txn_size:,} per transaction, 4 partitions")
    header = (
        f"{'linger_ms':>9} {'idempotent/s':>13} {'txn/s':>10} {'ratio':>6} {'ms/txn extra':>13}"
    )
    print(
        f"{'brokers':>7} "
        + header
        + "".join(f" {api + ' ms':>22}" for api in APIS)
        + f" {'metadata appends/txn':>21}"
    )
    for brokers, linger_ms in (
        (int(b), int(v)) for b in args.brokers.split(",") for v in args.linger_ms.split(",")
    ):
        r = run(linger_ms, args.records, args.txn_size, args.warm_up, brokers)
        extra_ms = 1000 * (args.records / r["transactional"] - args.records / r["idempotent"])
        line = (
            f"{brokers:>7} {linger_ms:>9} {r['idempotent']:>13,.0f} {r['transactional']:>10,.0f}"
            f" {r['transactional'] / r['idempotent']:>5.2f}x {extra_ms / transactions:>13.2f}"
        )
        line += "".join(f" {r[api + ' ms']:>12.2f} ({r[api + ' requests']:>5.0f})" for api in APIS)
        print(line + f" {r['metadata appends/txn']:>21.2f}")


if __name__ == "__main__":
    main()
