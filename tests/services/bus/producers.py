"""A producer that failed for good, as kafka-python leaves one whose broker was replaced (issue 41: the ingestion
service's producer logged `Aborting producer batches due to fatal error: ... InitProducerIdResponse: [Error -1]
UnknownError` for every later send).

    fail_for_good(publisher)   # from now on each send of its producer fails with that error; `renew` makes a new one

The fatal state is set on kafka-python's own transaction manager (kafka-python 3.0.12, pinned): its sender then
aborts every batch with the error, as after a refused InitProducerId. A broker replaced for real is what
tests/services/ingestion/test_broker_outage.py does; here the failure comes at a chosen moment, with the topics,
groups and offsets of a consumer left as they are.
"""

from __future__ import annotations

from kafka.errors import UnknownError

from services.bus.client import Publisher

REFUSED = "InitProducerIdResponse: [Error -1] UnknownError (the broker was replaced)"


def fail_for_good(publisher: Publisher) -> None:
    publisher.producer._transaction_manager.transition_to_fatal_error(UnknownError(REFUSED))
