"""`--scenario vision` against the embedded simulator: usage.prompt_tokens of every request is its
text's tokens plus exactly the simulator's rule for the images it sent; the result's image rows; bad input."""

from __future__ import annotations

import pytest

from tests.integration.core.helpers import cli_bare
from tests.integration.scenarios.runner import succeeded, vllm_locust
from vllm_sim.images import image_tokens
from vllm_sim.tokenizer import CHAT_TOKENS_BASE, CHAT_TOKENS_PER_MESSAGE
from vllm_users.workload.images import ImageSet, parse_buckets

FAST_SIM = ["--sim-args", "--fixed --ttft-ms 5 --itl-ms 1", "--output-len", "8"]
SIZES = "64x64:1,600x400:2,1000x90:1"


@pytest.mark.parametrize("fmt", ["png", "jpeg"])
def test_prompt_tokens_are_text_plus_the_rules_image_tokens(tmp_path, fmt: str) -> None:
    r = vllm_locust(
        tmp_path,
        "--scenario",
        "vision",
        "--images",
        "2",
        "--image-size",
        SIZES,
        "--image-format",
        fmt,
        "--input-len",
        "24",
        "--num-prompts",
        "16",
        "--seed",
        "3",
        *FAST_SIM,
    )
    assert succeeded(r), r.err
    images = ImageSet(parse_buckets(SIZES), fmt, 3)  # the same seed draws the same images
    recs = r.records()
    assert len(recs) == 16
    want_images = 0.0
    for x in recs:
        sent = images.pick(x["session"], 2, x["turn"])
        rule = sum(image_tokens(b.width, b.height) for b, _ in sent)
        text = x["input_len"] + CHAT_TOKENS_PER_MESSAGE + CHAT_TOKENS_BASE
        assert x["images"] == 2
        assert x["prompt_tokens"] == text + rule, x  # exactly: the simulator read each image's own header
        assert x["image_tokens"] == rule
        want_images += rule
    res = r.result
    assert res["total_images"] == 32 and res["mean_images_per_request"] == 2.0
    assert res["mean_image_tokens_per_request"] == pytest.approx(want_images / 16)
    assert not res.get("input_len_check")  # image tokens are no prompt-length error
    assert "Images per request:" in r.out and "Image tokens per request" in r.out


def test_images_on_the_chat_scenario_and_url_mode(tmp_path) -> None:
    """--images N on plain chat sends N parts; with --image-url-base the simulator sizes them by name."""
    r = vllm_locust(
        tmp_path,
        "--images",
        "3",
        "--image-size",
        "1024x1024",
        "--image-url-base",
        "http://images.example/x",
        "--num-prompts",
        "6",
        *FAST_SIM,
    )
    assert succeeded(r), r.err
    for x in r.records():
        assert x["images"] == 3
        assert x["prompt_tokens"] >= 3 * image_tokens(1024, 1024)  # 1225 each, by the URL's name
        assert x["image_tokens"] is None  # the chat scenario does not claim its text count: no estimate
    assert "mean_image_tokens_per_request" not in r.result


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--scenario", "vision", "--endpoint", "completions"], "--endpoint chat"),
        (["--images", "1", "--endpoint", "completions"], "--endpoint chat"),
        (["--image-size", "0x10"], "1-16384"),
        (["--image-size", "64x64:0"], "weight must be"),
        (["--image-size", "64by64"], "not an image size"),
        (["--image-url-base", "ftp://x"], "http"),
    ],
)
def test_bad_image_input_is_one_line_and_exit_2(tmp_path, args: list[str], says: str) -> None:
    done = cli_bare(["run", *args, "--num-prompts", "1", "--output-dir", str(tmp_path), "--no-report"])
    assert done.returncode == 2, done.stderr
    err = [x for x in done.stderr.splitlines() if x.strip()]
    assert len(err) <= 2 and says in done.stderr, done.stderr  # argparse: usage line + one error line
