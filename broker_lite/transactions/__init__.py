"""Kafka's transactions on the broker: the coordinator and the markers it writes."""
