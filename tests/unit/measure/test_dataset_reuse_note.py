"""A dataset smaller than the requests sent is said with its reuse factor and the prefix-cache share it caused."""

from __future__ import annotations

from vllm_users.measure.result_notes import dataset_reuse_note


def test_the_note_gives_the_reuse_factor_and_the_cache_share() -> None:
    note = dataset_reuse_note("d.json", 24, 200, (0.284, "912 of 3210 prompt tokens, the server's counters"))
    assert note is not None and note.startswith("DATASET REUSED: d.json has 24 prompts for 200 requests")
    assert "each prompt was sent 8.3 times" in note and "28.4% of the prompt tokens" in note
    assert note.endswith("--num-prompts 24")


def test_no_note_when_every_request_had_its_own_prompt_and_unknown_hits_said_unknown() -> None:
    assert dataset_reuse_note("d.json", 24, 24, (0.5, "x")) is None
    assert dataset_reuse_note("d.json", 24, 12, None) is None
    note = dataset_reuse_note("d.json", 10, 30, None)
    assert note is not None and "prefix-cache hits are unknown" in note and "%" not in note
