"""alnair.webserver.bounds: each class of peer has its own limit, the connection idle the longest gives way, and
one being answered never does."""

from __future__ import annotations

from alnair.webserver.bounds import ConnectionBounds


def test_at_the_limit_the_connection_idle_the_longest_gives_way():
    bounds = ConnectionBounds(2)
    first, _ = bounds.admit(False)
    second, _ = bounds.admit(False)
    with bounds.answering(first):
        pass  # answered since second arrived: second is now the one idle the longest
    third, evicted = bounds.admit(False)
    assert third is not None and evicted is second and second.released
    assert bounds.open_connections() == 2


def test_a_connection_being_answered_never_gives_way_and_then_a_new_one_is_refused():
    bounds = ConnectionBounds(1)
    busy, _ = bounds.admit(False)
    with bounds.answering(busy):
        assert bounds.admit(False) == (None, None)
    _, evicted = bounds.admit(False)
    assert evicted is busy


def test_priority_peers_have_a_limit_of_their_own():
    bounds = ConnectionBounds(1)
    anyone, _ = bounds.admit(False)
    with bounds.answering(anyone):
        prioritised, evicted = bounds.admit(True)
        assert prioritised is not None and evicted is None
    assert (bounds.open_connections(False), bounds.open_connections(True), bounds.open_connections()) == (1, 1, 2)


def test_a_place_is_freed_once_however_often_its_connection_is_released():
    bounds = ConnectionBounds(2)
    slot, _ = bounds.admit(False)
    bounds.release(slot)
    bounds.release(slot)
    assert bounds.open_connections() == 0
    with bounds.answering(slot):
        pass  # a request that ends after its connection did: the slot stays released, not idle again
    assert bounds.admit(False)[1] is None and bounds.admit(False)[1] is None
