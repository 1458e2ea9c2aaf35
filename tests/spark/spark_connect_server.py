"""A local Spark Connect server for the tests, run as a subprocess.

Usage: python -m tests.spark.spark_connect_server PORT

Starts a local[2] Spark driver with the Connect plugin listening on
127.0.0.1:PORT, prints ``ready`` and serves until its stdin closes.
"""

from __future__ import annotations

import sys

from tests.spark.spark_support import new_session


def main(port: str) -> int:
    spark = new_session(
        "sparklog-connect-server",
        **{
            "spark.plugins": "org.apache.spark.sql.connect.SparkConnectPlugin",
            "spark.connect.grpc.binding.address": "127.0.0.1",
            "spark.connect.grpc.binding.port": port,
        },
    )
    print("ready", flush=True)
    sys.stdin.read()  # serve until the test closes our stdin
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
