"""Security shared by the broker, the CLI and embedded clients (docs/security.md).

:mod:`.scram` computes and checks SCRAM credentials (RFC 5802/7677);
:mod:`.users` keeps them in the cluster metadata log (``scram_credential``
records), where every broker's in-memory image answers from.
"""
