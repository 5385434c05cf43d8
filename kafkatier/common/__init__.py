"""Neutral building blocks below every layer: shared value types (:mod:`.structs`) and the one scheduler
(:mod:`.scheduler`).  Nothing here imports another kafkatier package except ``kafkatier.logsetup``."""
