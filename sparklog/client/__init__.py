"""sparklog's Python client: Producer, Consumer, Admin, the partitioner and the transports.

The transports reach a storage root directly (embedded) or brokers over Arrow
Flight; the public calls are the same in both modes.
"""
