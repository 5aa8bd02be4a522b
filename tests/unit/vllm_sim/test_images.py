"""The simulator's image accounting: Qwen2-VL's tokens by resolution, the size read from a data
URL's PNG/JPEG header or a URL's name, the tokens inside the prompt (usage and prefill), bad image parts."""

from __future__ import annotations

import base64
import json
import urllib.request

import pytest

from vllm_sim import images as S
from vllm_sim import tokenizer as tok
from vllm_sim.request import ApiError, parse_request
from vllm_users.workload.images import encode_jpeg, encode_png, random_pixels


def _data_url(kind: str, w: int, h: int) -> str:
    px = random_pixels(w, h, 1)
    data = encode_png(px) if kind == "png" else encode_jpeg(px)
    return f"data:image/{kind};base64,{base64.b64encode(data).decode()}"


def _chat(*urls: str, text: str = "two words") -> list[dict]:
    parts = [{"type": "text", "text": text}, *({"type": "image_url", "image_url": {"url": u}} for u in urls)]
    return [{"role": "system", "content": "be brief"}, {"role": "user", "content": parts}]


@pytest.mark.parametrize(
    ("size", "tokens"),
    [
        ((512, 512), 324),
        ((1280, 720), 1196),
        ((600, 400), 294),
        ((1024, 1024), 1225),
        ((64, 64), 4),
        ((10, 10), 4),
        ((28, 28), 4),
        ((1000, 90), 108),
    ],
)
def test_tokens_by_resolution_follow_qwen2_vl(size: tuple[int, int], tokens: int) -> None:
    assert S.image_tokens(*size) == tokens
    w, h = S.resized(*size)
    assert w % S.PATCH == 0 and h % S.PATCH == 0 and S.MIN_PIXELS <= w * h <= S.MAX_PIXELS


@pytest.mark.parametrize("kind", ["png", "jpeg"])
def test_size_from_the_image_header(kind: str) -> None:
    pytest.importorskip("PIL")
    assert S.image_size(_data_url(kind, 123, 45)) == (123, 45)


def test_jpeg_header_past_a_big_exif_block() -> None:
    pytest.importorskip("PIL")
    jpg = encode_jpeg(random_pixels(33, 17, 2))
    app1 = b"\xff\xe1" + (60_002).to_bytes(2, "big") + bytes(60_000)  # SOF comes ~80,000 base64 chars in
    url = "data:image/jpeg;base64," + base64.b64encode(jpg[:2] + app1 + jpg[2:]).decode()
    assert S.image_size(url) == (33, 17)


def test_size_from_the_url_name_else_the_default() -> None:
    assert S.image_size("http://h/x/img_640x480_3.png") == (640, 480)
    assert S.image_size("https://h/1920x1080/cat.jpg?v=2") == S.DEFAULT_SIZE  # only the file's name counts
    assert S.image_size("https://h/cat.jpg") == S.DEFAULT_SIZE


def test_bad_data_urls_are_a_400() -> None:
    for url in ("data:image/png,raw", "data:image/png;base64," + base64.b64encode(b"GIF89a....").decode()):
        with pytest.raises(ValueError):
            S.image_size(url)
        body = {"model": "m", "max_tokens": 2, "messages": _chat(url)}
        with pytest.raises(ApiError) as e:
            parse_request(json.dumps(body).encode(), True, "m", 100_000)
        assert e.value.status == 400
    with pytest.raises(ApiError):
        parse_request(
            json.dumps(
                {
                    "model": "m",
                    "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}],
                }
            ).encode(),
            True,
            "m",
            100_000,
        )


def test_image_tokens_sit_in_the_prompt_after_their_text() -> None:
    a, b = _data_url("png", 600, 400), _data_url("png", 64, 64)
    msgs = _chat(a, b)
    ids = S.encode_chat(msgs)
    text_only = tok.encode_chat([msgs[0], {"role": "user", "content": "two words"}])
    assert len(ids) == len(text_only) + 294 + 4
    # the system message and the user's text come first, unchanged; the images follow the text
    head = len(tok.encode_chat([msgs[0]])) - 3 + 2 + 2  # system block, then the user's start, role, 2 words
    assert ids[:head] == text_only[:head] and ids[-5:] == text_only[-5:]
    assert S.encode_chat(_chat(a, b)) == ids and S.encode_chat(_chat(b, a)) != ids  # same image, same ids
    plain = [{"role": "user", "content": "no images here"}]
    assert S.encode_chat(plain) == tok.encode_chat(plain)
    raw = json.dumps({"model": "m", "max_tokens": 2, "messages": msgs}).encode()
    req = parse_request(raw, True, "m", 100_000)
    assert req.prompt_tokens == len(ids)  # what usage reports and the engine prefills


def test_usage_through_the_server(sim) -> None:
    url = _data_url("png", 1280, 720)
    body = {
        "max_tokens": 1,
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "a b c"},
                    {"type": "image_url", "image_url": {"url": url}},
                ],
            }
        ],
    }
    req = urllib.request.Request(
        f"{sim.url}/v1/chat/completions", json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=30) as r:
        usage = json.loads(r.read())["usage"]
    assert usage["prompt_tokens"] == 3 + tok.CHAT_TOKENS_PER_MESSAGE + tok.CHAT_TOKENS_BASE + 1196
