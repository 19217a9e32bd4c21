"""What every rule module shares: a problem is (dotted key, message); `divisors` and
`must_divide` word the hints."""

from __future__ import annotations

from collections.abc import Iterator

__all__ = ["Problem", "divisors", "must_divide"]

Problem = tuple[str, str]


def divisors(n: int, limit: int = 8) -> str:
    """'1, 2, 4, 8, ...' : the first `limit` divisors of n, for hints."""
    ds = [d for d in range(1, n + 1) if n % d == 0]
    text = ", ".join(str(d) for d in ds[:limit])
    return text + (", ..." if len(ds) > limit else "")


def must_divide(key: str, value: int, other_key: str, other: int) -> Iterator[Problem]:
    if other % value:
        yield key, (
            f"{value} must divide {other_key}={other} (valid: {divisors(other)})"
        )
