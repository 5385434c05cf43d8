"""Coordinators (Kafka's ``kafka.coordinator``): the group coordinator lives in :mod:`.group`.

Layer: server -> coordinator -> controller.  Nothing here imports ``kafkatier.server``; the broker passes the
collaborators (the log of ``__consumer_offsets``, the timer) to the constructors.
"""
