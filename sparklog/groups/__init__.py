"""Consumer-group coordination shared by the broker and by embedded clients.

Kafka's classic protocol (join, sync, heartbeat, leave, generations) with
coordinator-side assignors; state and committed offsets live on the storage root.
"""
