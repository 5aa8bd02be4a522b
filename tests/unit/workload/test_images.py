"""Images of the vision load: buckets and their errors, PNG/JPEG bytes that decoders read back at
the size asked, seeded pools, the draw's weights, and how parts are attached to a chat body."""

from __future__ import annotations

import argparse
import base64
import io
import zlib
from collections import Counter
from typing import Any

import numpy as np
import pytest

from vllm_users import option_types as T
from vllm_users.workload import images as I


def _bytes(url: str) -> bytes:
    head, _, payload = url.partition(",")
    assert head in ("data:image/png;base64", "data:image/jpeg;base64")
    return base64.b64decode(payload)


def test_buckets_parse_with_default_weight() -> None:
    assert I.parse_buckets("512x512, 1024X768:0.25") == [I.Bucket(512, 512, 1.0), I.Bucket(1024, 768, 0.25)]


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("0x10", "1-16384"),
        ("10x0", "1-16384"),
        ("20000x10", "1-16384"),
        ("64x64:0", "> 0"),
        ("64x64:-1", "> 0"),
        ("64x64:abc", "not a number"),
        ("64x64:inf", "> 0"),
        ("64by64", "not an image size"),
        ("", "no image size"),
        ("64x64,", None),
    ],
)
def test_bad_buckets_name_the_bad_part(text: str, says: str | None) -> None:
    if says is None:  # a trailing comma is only an empty part
        assert I.parse_buckets(text) == [I.Bucket(64, 64, 1.0)]
        return
    with pytest.raises(ValueError, match=says):
        I.parse_buckets(text)
    with pytest.raises(argparse.ArgumentTypeError, match=says):  # the option's parser says the same
        I.image_sizes(text)


def test_png_is_valid_and_holds_the_pixels() -> None:
    px = I.random_pixels(37, 11, 5)
    png = I.encode_png(px)
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and png[12:16] == b"IHDR"
    # decode our own bytes with zlib: every row is filter 0 + the RGB bytes, and each chunk's CRC holds
    pos, chunks = 8, {}
    while pos < len(png):
        n = int.from_bytes(png[pos : pos + 4], "big")
        tag, data = png[pos + 4 : pos + 8], png[pos + 8 : pos + 8 + n]
        assert int.from_bytes(png[pos + 8 + n : pos + 12 + n], "big") == zlib.crc32(tag + data)
        chunks[tag] = data
        pos += 12 + n
    assert set(chunks) == {b"IHDR", b"IDAT", b"IEND"}
    rows = np.frombuffer(zlib.decompress(chunks[b"IDAT"]), dtype=np.uint8).reshape(11, 37 * 3 + 1)
    assert not rows[:, 0].any() and np.array_equal(rows[:, 1:].reshape(11, 37, 3), px)
    pil = pytest.importorskip("PIL.Image")
    img = pil.open(io.BytesIO(png))
    assert img.size == (37, 11) and np.array_equal(np.asarray(img.convert("RGB")), px)


def test_jpeg_through_pillow_at_the_size_asked() -> None:
    pil = pytest.importorskip("PIL.Image")
    img = pil.open(io.BytesIO(I.encode_jpeg(I.random_pixels(100, 60, 1))))
    assert img.format == "JPEG" and img.size == (100, 60)


def test_jpeg_without_pillow_is_one_line_naming_pip(monkeypatch: pytest.MonkeyPatch) -> None:
    import builtins

    real = builtins.__import__

    def no_pil(name: str, *a: object, **kw: object) -> object:
        if name.startswith("PIL"):
            raise ImportError(name)
        return real(name, *a, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(builtins, "__import__", no_pil)
    with pytest.raises(ValueError, match="pip install pillow") as e:
        I.encode_jpeg(I.random_pixels(2, 2, 0))
    assert "\n" not in str(e.value)


def test_same_seed_same_bytes_other_seed_other_bytes() -> None:
    b = I.parse_buckets("16x8")
    one, two, other = I.ImageSet(b, "png", 7), I.ImageSet(b, "png", 7), I.ImageSet(b, "png", 8)

    def sent(s: I.ImageSet) -> list[str]:
        return [I.data_url(u) for i in range(20) for _, u in s.pick(i, 3)]

    assert sent(one) == sent(two) and sent(one) != sent(other)
    data = [I.data_url(u) for u in one._pool[(16, 8)]]
    assert data == [I.data_url(u) for u in two._pool[(16, 8)]]
    assert data != [I.data_url(u) for u in other._pool[(16, 8)]]
    assert len(set(data)) == I.POOL  # the pool's images differ from each other
    for _, url in one.pick(0, 4):
        png = _bytes(I.data_url(url))
        assert int.from_bytes(png[16:20], "big") == 16 and int.from_bytes(png[20:24], "big") == 8


def test_sizes_are_drawn_by_weight() -> None:
    s = I.ImageSet(I.parse_buckets("8x8:3,16x16:1"), "png", 0)
    drawn = Counter((b.width for i in range(4000) for b, _ in s.pick(i, 1)))
    assert drawn[8] / 4000 == pytest.approx(0.75, abs=0.03)  # binomial sd 0.007: 4 sd of slack


def test_url_mode_names_size_and_slot() -> None:
    s = I.ImageSet(I.parse_buckets("640x480"), "jpeg", 0, "http://img.example/base/")
    urls = {u for i in range(50) for _, u in s.pick(i, 2)}
    assert urls == {f"http://img.example/base/img_640x480_{k}.jpg" for k in range(I.POOL)}
    assert T.url_base("https://x") == "https://x"
    with pytest.raises(argparse.ArgumentTypeError, match="http"):
        T.url_base("img.example")


def test_attach_to_the_last_user_message_without_touching_the_source() -> None:
    msgs = [{"role": "system", "content": "sys"}, {"role": "user", "content": "hello"}]
    parts = [{"type": "image_url", "image_url": {"url": "u1"}}]
    out = I.attach_images(msgs, parts)
    assert out is not None and msgs[1]["content"] == "hello"  # the prompt source's messages are not changed
    assert out[1]["content"] == [{"type": "text", "text": "hello"}, *parts] and out[0] is msgs[0]
    assert I.attach_images(out, parts) is None  # already has its images: none added twice
    assert I.count_image_parts(out) == 1


def _opts(**kw: Any) -> I.ImageOptions:
    return I.ImageOptions(**{"image_size": "8x8", **kw})


def test_request_images_counts_and_needs_chat() -> None:
    body = {"messages": [{"role": "user", "content": "x"}]}
    assert I.request_images(dict(body), _opts(), 0, 0, 0) == 0  # no --images: nothing attached
    assert I.request_images(body, _opts(images=2), 0, 0, 0, at_least=1) == 2
    assert I.count_image_parts(body["messages"]) == 2
    assert I.request_images({"prompt": "x"}, _opts(images=2), 0, 0, 0) == 0  # completions: no messages
    I.check_images(_opts(images=1), "chat", vision=False)
    with pytest.raises(ValueError, match="--endpoint chat"):
        I.check_images(_opts(images=1), "completions", vision=False)
    with pytest.raises(ValueError, match="--endpoint chat"):
        I.check_images(_opts(), "completions", vision=True)
    I.check_images(_opts(), "completions", vision=False)  # no images: nothing to check


def test_a_request_that_says_its_own_count_overrides_images() -> None:
    body = {"messages": [{"role": "user", "content": "x"}]}
    assert I.request_images(body, _opts(images=3), 0, 0, 0, at_least=1, count=1) == 1
    assert (
        I.request_images({"messages": [{"role": "user", "content": "x"}]}, _opts(images=3), 0, 0, 0, count=0)
        == 0
    )


def test_encode_body_is_json_dumps_of_the_real_urls() -> None:
    """The body holds placeholders; encode_body gives the bytes json.dumps of the data URLs would."""
    import json

    body = {"model": "m", "messages": [{"role": "user", "content": 'a "quoted" é'}]}
    assert I.request_images(body, _opts(image_size="20x10,8x8"), 1, 5, 0, count=3) == 3
    real = json.loads(json.dumps(body))
    for part in real["messages"][-1]["content"][1:]:
        assert part["image_url"]["url"].startswith("@@vllm-locust-image-")  # the body holds placeholders
        part["image_url"]["url"] = I.data_url(part["image_url"]["url"])
        assert part["image_url"]["url"].startswith("data:image/png;base64,")
    assert I.encode_body(body) == json.dumps(real, separators=(",", ":")).encode()
    assert I.encode_body({"a": 1}) == b'{"a":1}'
