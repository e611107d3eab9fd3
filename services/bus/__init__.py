"""The event bus: versioned Kafka topics carrying `cheems.v1` protobuf events.

`topics` (names and payload types), `codec` (bytes <-> events, with content-type, schema-version
and type headers), `broker` (the embedded Tansu broker for one machine and tests), `producer` and `consumer`
(at-least-once: offsets are committed only after the handler's effect is durable; bad messages
go to a dead-letter topic and never stop a consumer). Any Kafka cluster works by bootstrap address.
"""
