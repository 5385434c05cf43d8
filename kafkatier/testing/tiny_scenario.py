"""The quickest scenario there is, for sweep tests and the sweep benchmark: one broker, a 4-second producer run
and one pause the seed places."""
from __future__ import annotations


def tiny_scenario(name: str, heal_timeout_s: int | None = None) -> str:
    """The scenario file's text, named ``name`` (with ``[heal] timeout_s`` when ``heal_timeout_s`` is given)."""
    text = f"""# A one-broker scenario for sweeps.
name = "{name}"
duration_s = 4
[cluster]
brokers = 1
[[topics]]
name = "t"
replication_factor = 1
[[workloads]]
type = "producer"
topic = "t"
rate = 50
[[schedule]]
at = [0.5, 2.0]
action = "pause"
target = 1
duration_s = [0.2, 0.5]
"""
    if heal_timeout_s is not None:
        text += f"[heal]\ntimeout_s = {heal_timeout_s}\n"
    return text
