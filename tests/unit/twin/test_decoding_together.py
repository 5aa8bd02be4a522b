"""The TPOT point's batch from the client's own times, where a /metrics scrape every 0.1 s misses a fast burst."""

from __future__ import annotations

from orchestration.twin.probe import Shot, decoding_together


def _shot(start: float, ttft: float, e2e: float, error: str | None = None) -> Shot:
    return Shot(
        prompt_tokens=32, max_tokens=64, output_tokens=64, ttft_s=ttft, e2e_s=e2e, started=start, error=error
    )


def test_streams_started_together_decode_together() -> None:
    """16 streams of a fast GPU (64 tokens in ~0.1 s), started within 2 ms: a batch of 16, not the scrape's 1."""
    shots = [_shot(0.0001 * i, 0.010, 0.115) for i in range(16)]
    assert decoding_together(shots) == 16


def test_waves_behind_a_seat_limit_count_one_wave() -> None:
    """64 streams behind 32 seats: the second wave starts decoding as the first ends: a batch of 32."""
    first = [_shot(0.0, 0.010, 0.200) for _ in range(32)]
    second = [_shot(0.0, 0.205, 0.400) for _ in range(32)]
    assert decoding_together(first + second) == 32


def test_a_rolling_admission_counts_what_overlapped() -> None:
    """An API server admitting one stream every 4 ms, each decoding for 330 ms: ~82 at once, as vLLM's one
    API-server process held 256 streams started together on the H100."""
    shots = [_shot(0.0, 0.004 * i + 0.005, 0.004 * i + 0.335) for i in range(256)]
    assert 80 <= (decoding_together(shots) or 0) <= 84


def test_failed_or_single_streams_say_nothing() -> None:
    """Failed streams do not count; fewer than two decoding streams: no count (the scrape's stands)."""
    assert decoding_together([_shot(0.0, 0.01, 0.1)]) is None
    assert decoding_together([_shot(0.0, 0.01, 0.1), _shot(0.0, 0.01, 0.1, error="HTTP 500")]) is None
    assert decoding_together([_shot(0.0, 0.01, 0.1), _shot(0.0, 0.01, 0.1)]) == 2
