"""What the API-server fit says about bursts it could not use: a burst with a failed request is not kept, and
the profile's notes say which and why (a calibration on vLLM lost both request bursts and said only "no burst
kept")."""

from __future__ import annotations

from orchestration.twin.apiphase import _dropped
from orchestration.twin.apistage import fit_api
from orchestration.twin.probe import Shot


def _shot(error: str | None) -> Shot:
    return Shot(prompt_tokens=32, max_tokens=1, output_tokens=1, ttft_s=0.01, e2e_s=0.01, error=error)


def test_a_dropped_burst_says_how_many_failed_and_the_first_reason() -> None:
    shots = [_shot(None), _shot("no token came back"), _shot("HTTP 503: busy")]
    got = _dropped("request", "3 x 32 tokens", shots, shots[:1])
    assert got == {
        "kind": "request",
        "what": "3 x 32 tokens",
        "dropped": "2 of 3 failed (no token came back)",
    }


def test_the_fit_notes_name_each_dropped_burst() -> None:
    raw = {
        "api": [],
        "api_dropped": [
            {"kind": "request", "what": "64 x 32 tokens", "dropped": "1 of 64 failed (no token came back)"},
            {"kind": "request", "what": "64 x 1024 tokens", "dropped": "2 of 64 failed (HTTP 503: busy)"},
        ],
    }
    got, notes = fit_api(raw)
    assert got == {}
    assert notes[0] == "request burst of 64 x 32 tokens not kept: 1 of 64 failed (no token came back)"
    assert notes[1].startswith("request burst of 64 x 1024 tokens not kept: 2 of 64")
    assert "no API-server stage" in notes[-1]
