"""Leader election strategies: who leads, and what the ISR becomes."""
from kafkatier.controller.election import (ElectionResult, leader_for_controlled_shutdown, leader_for_offline,
                                           leader_for_preferred, leader_for_reassign)


def test_offline_prefers_assignment_order_among_live_isr():
    assert leader_for_offline([1, 2, 3], isr=[3, 2], live=[2, 3], unclean_enabled=False) == ElectionResult(2, (3, 2))


def test_offline_without_live_isr_is_unclean_only_when_enabled():
    assert leader_for_offline([1, 2, 3], isr=[1], live=[2, 3], unclean_enabled=False) is None
    assert leader_for_offline([1, 2, 3], isr=[1], live=[3, 2], unclean_enabled=True) == ElectionResult(2, (2,), True)


def test_reassign_picks_first_target_replica_in_isr_and_keeps_isr():
    assert leader_for_reassign([4, 5, 6], isr=[1, 5, 4], live=[1, 4, 5, 6]) == ElectionResult(4, (1, 5, 4))
    assert leader_for_reassign([4, 5], isr=[1, 2], live=[1, 2, 4, 5]) is None


def test_preferred_is_the_first_assigned_replica_if_eligible():
    assert leader_for_preferred([2, 1, 3], isr=[1, 2, 3], live=[1, 2, 3]) == ElectionResult(2, (1, 2, 3))
    assert leader_for_preferred([2, 1, 3], isr=[1, 3], live=[1, 2, 3]) is None
    assert leader_for_preferred([2, 1, 3], isr=[1, 2, 3], live=[1, 3]) is None


def test_controlled_shutdown_moves_away_and_shrinks_isr():
    r = leader_for_controlled_shutdown([1, 2, 3], isr=[1, 2, 3], live_or_shutting_down=[1, 2, 3], shutting_down={1})
    assert r == ElectionResult(2, (2, 3))
    assert leader_for_controlled_shutdown([1, 2], isr=[1], live_or_shutting_down=[1, 2], shutting_down={1}) is None
