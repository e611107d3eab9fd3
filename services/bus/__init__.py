"""The event bus: versioned Kafka topics carrying `cheems.v1` protobuf events.

`topics` (names and payload types), `codec` (bytes <-> events, with content-type, schema-version
and type headers), `broker` (the embedded Tansu broker for one machine and tests), `client`: the publisher
and consumer (at-least-once: offsets are committed only after the handler's effect is durable; bad messages
go to a dead-letter topic and never stop a consumer), `relay` (publishes a store's outbox after the commit,
holding no transaction while it waits for the broker; the store is handed in, this package imports none).
Any Kafka cluster works by bootstrap address.
"""
