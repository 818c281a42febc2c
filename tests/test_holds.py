"""The in-flight ledger: holds per pod, totals per node, deadlines in order."""

import random

from extender.core.holds import Hold, HoldLedger


def test_expiry_releases_exactly_the_holds_past_their_deadline() -> None:
    ledger = HoldLedger()
    ledger.hold("a", Hold(("n1", "n2"), 10, 1, expires_at=5.0))
    ledger.hold("b", Hold(("n2",), 20, 2, expires_at=7.0))
    ledger.hold("c", Hold(("n3",), 30, 3, expires_at=5.0))  # the same deadline as "a"
    assert ledger.expire(4.9) == set()
    assert ledger.expire(5.0) == {"n1", "n2", "n3"}
    assert ledger.held_on("n2") == (20, 2)
    assert "a" not in ledger
    assert "b" in ledger
    assert ledger.expire(100.0) == {"n2"}
    assert len(ledger) == 0
    assert ledger.held_on("n2") == (0, 0)


def test_a_hold_replaced_or_released_does_not_expire_on_its_old_deadline() -> None:
    ledger = HoldLedger()
    ledger.hold("a", Hold(("n1",), 10, 1, expires_at=5.0))
    ledger.hold("a", Hold(("n2",), 10, 1, expires_at=9.0))  # the pod's next attempt
    ledger.hold("b", Hold(("n3",), 10, 1, expires_at=5.0))
    ledger.release("b")
    assert ledger.expire(6.0) == set()
    assert ledger.held_on("n2") == (10, 1)
    assert ledger.expire(9.0) == {"n2"}


def test_deadlines_stay_bounded_when_the_same_pods_are_held_again_and_again() -> None:
    ledger = HoldLedger()
    rng = random.Random(1)
    for step in range(10_000):
        uid = f"pod-{rng.randrange(20)}"
        ledger.hold(uid, Hold((f"n{rng.randrange(5)}",), 1, 1, expires_at=1000.0 + step))
    assert len(ledger) == 20
    assert len(ledger._deadlines) <= 2 * 20 + 64 + 1
    assert sum(ledger.held_on(f"n{i}")[0] for i in range(5)) == 20
    ledger.expire(1e9)
    assert len(ledger) == 0
    assert all(ledger.held_on(f"n{i}") == (0, 0) for i in range(5))
