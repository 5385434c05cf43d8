"""Coordinators (Kafka's ``kafka.coordinator``): the group coordinator lives in :mod:`.group`, the transaction
coordinator in :mod:`.transaction`.

Layer: server -> coordinator -> controller.  Nothing here imports ``kafkatier.server``; the broker passes the
collaborators (the logs of ``__consumer_offsets`` and ``__transaction_state``, the timer, the marker sender's
broker client) to the constructors.
"""
