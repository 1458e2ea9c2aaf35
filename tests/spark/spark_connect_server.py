"""A local Spark Connect server for the tests, run as a subprocess.

Usage: python -m tests.spark.spark_connect_server

Starts a local[2] Spark driver with the Connect plugin listening on a port of
127.0.0.1 the system chooses, prints ``ready PORT`` and serves until its stdin
closes. The server binds its own port so that no other process can take a port
chosen beforehand between the choice and the bind.
"""

from __future__ import annotations

import sys

from tests.spark.spark_support import new_session


def main() -> int:
    spark = new_session(
        "sparklog-connect-server",
        **{
            "spark.plugins": "org.apache.spark.sql.connect.SparkConnectPlugin",
            "spark.connect.grpc.binding.address": "127.0.0.1",
            "spark.connect.grpc.binding.port": "0",
        },
    )
    service = getattr(spark._jvm.org.apache.spark.sql.connect.service, "SparkConnectService$")
    port = getattr(service, "MODULE$").localPort()
    print(f"ready {port}", flush=True)
    sys.stdin.read()  # serve until the test closes our stdin
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
