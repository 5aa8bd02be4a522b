"""Random images for vision-language load: seeded pixels, encoded here, sent as image_url parts.

Like `vllm bench serve`'s random-mm dataset: each image's size is drawn from buckets with weights
(`--image-size 512x512:3,1024x768:1`, vLLM's `--random-mm-bucket-config`), its pixels are uniform random bytes.
PNG is encoded here with zlib and struct (no dependency); JPEG uses Pillow (which matplotlib already needs), with
a one-line error naming `pip install pillow` when it is missing. Images are encoded once per process: a pool of
`POOL` images per size, made when a user starts, never on the hot path; request `index`'s images are picked
from the pool by a seeded draw, so the same --seed sends the same bytes. With `--image-url-base URL` the parts
are URLs `URL/img_<w>x<h>_<k>.png` (`.jpg` for JPEG) that the server fetches itself.
"""

from __future__ import annotations

import base64
import io
import json
import random
import re
import struct
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from vllm_users import option_types as T
from vllm_users.option_spec import BOTH, opt

__all__ = [
    "FORMATS",
    "IMAGES_NEED_CHAT",
    "POOL",
    "Bucket",
    "ImageOptions",
    "ImageSet",
    "attach_images",
    "check_images",
    "count_image_parts",
    "data_url",
    "encode_body",
    "encode_jpeg",
    "encode_png",
    "image_set",
    "image_url",
    "parse_buckets",
    "random_pixels",
    "request_images",
]

FORMATS = ("png", "jpeg")
POOL = 4  # distinct images per size and process: enough that the server's encoder cache is not all hits
MAX_SIDE = 16384  # a side above this is a typo, not a test
IMAGES_NEED_CHAT = "--scenario vision and --images need --endpoint chat (completions take no images)"
_BUCKET = re.compile(r"^\s*(\d+)\s*[xX]\s*(\d+)\s*(?::\s*([^,]*?))?\s*$")


@dataclass(frozen=True, slots=True)
class Bucket:
    """One image size and its weight in the draw."""

    width: int
    height: int
    weight: float


def parse_buckets(text: str) -> list[Bucket]:
    """`512x512,1024x768:0.25` -> buckets (weight 1 when not given); ValueError naming the bad part."""
    parts = [p for p in text.split(",") if p.strip()]
    if not parts:
        raise ValueError("no image size given (expected WxH[:WEIGHT],...)")
    out: list[Bucket] = []
    for part in parts:
        m = _BUCKET.match(part)
        if m is None:
            raise ValueError(f"{part.strip()!r} is not an image size like 512x512 or 512x512:2")
        w, h = int(m.group(1)), int(m.group(2))
        if not (0 < w <= MAX_SIDE and 0 < h <= MAX_SIDE):
            raise ValueError(f"{part.strip()!r}: width and height must be 1-{MAX_SIDE} pixels")
        try:
            weight = float(m.group(3)) if m.group(3) is not None else 1.0
        except ValueError:
            raise ValueError(f"{part.strip()!r}: the weight is not a number") from None
        if not weight > 0 or weight == float("inf"):
            raise ValueError(f"{part.strip()!r}: the weight must be a number > 0")
        out.append(Bucket(w, h, weight))
    return out


def random_pixels(width: int, height: int, seed: int | Sequence[int]) -> np.ndarray:
    """Uniform random RGB bytes, (height, width, 3) uint8, the same for the same seed (vLLM's random-mm)."""
    return np.random.default_rng(list(seed) if isinstance(seed, Sequence) else seed).integers(
        0, 256, size=(height, width, 3), dtype=np.uint8
    )


def _chunk(tag: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data))


def encode_png(pixels: np.ndarray) -> bytes:
    """An 8-bit RGB PNG of `pixels` (height, width, 3): every row with filter 0, one zlib stream."""
    h, w, _ = pixels.shape
    rows = np.zeros((h, w * 3 + 1), dtype=np.uint8)  # a leading 0 per row: filter type None
    rows[:, 1:] = pixels.reshape(h, w * 3)
    ihdr = struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)  # 8 bits, colour type 2 (RGB), no interlace
    idat = zlib.compress(rows.tobytes(), 1)  # random pixels do not compress: level 1 is as small and fast
    return b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", ihdr) + _chunk(b"IDAT", idat) + _chunk(b"IEND", b"")


def encode_jpeg(pixels: np.ndarray, quality: int = 85) -> bytes:
    """A baseline JPEG of `pixels` through Pillow; ValueError naming `pip install pillow` when it is missing."""
    try:
        from PIL import Image
    except ImportError:
        raise ValueError(
            "--image-format jpeg needs Pillow: pip install pillow (or use --image-format png)"
        ) from None
    buf = io.BytesIO()
    Image.fromarray(pixels, "RGB").save(buf, format="JPEG", quality=quality)
    return buf.getvalue()


def image_url(base: str, width: int, height: int, k: int, fmt: str) -> str:
    """The URL of pool image `k` of a size under --image-url-base: BASE/img_<w>x<h>_<k>.png (or .jpg)."""
    return f"{base.rstrip('/')}/img_{width}x{height}_{k}.{'jpg' if fmt == 'jpeg' else 'png'}"


class ImageSet:
    """The run's images: a pool per bucket size, encoded once; `urls(index, n)` picks request `index`'s."""

    def __init__(
        self, buckets: Sequence[Bucket], fmt: str = "png", seed: int = 0, url_base: str = ""
    ) -> None:
        if fmt not in FORMATS:
            raise ValueError(f"--image-format {fmt!r} is not one of {', '.join(FORMATS)}")
        self.buckets = list(buckets)
        self.fmt, self.seed, self.url_base = fmt, seed, url_base
        self._weights = [b.weight for b in self.buckets]
        self._pool: dict[tuple[int, int], list[str]] = {}
        for b in self.buckets:
            size = (b.width, b.height)
            if size not in self._pool:
                self._pool[size] = [self._make(b.width, b.height, k) for k in range(POOL)]

    def _make(self, width: int, height: int, k: int) -> str:
        """A pool image's URL as the body holds it: the URL itself, or a data URL's placeholder (encode_body)."""
        if self.url_base:
            return image_url(self.url_base, width, height, k, self.fmt)
        return _placeholder(self._data_url(width, height, k))

    def _data_url(self, width: int, height: int, k: int) -> str:
        # one seed per (run seed, size, slot): a size's pool does not change when another bucket is added
        pixels = random_pixels(width, height, (self.seed, width, height, k))
        data = encode_png(pixels) if self.fmt == "png" else encode_jpeg(pixels)
        mime = "image/png" if self.fmt == "png" else "image/jpeg"
        return f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}"

    def pick(self, index: int, n: int, turn: int = 0) -> list[tuple[Bucket, str]]:
        """Request `index`'s (turn `turn`'s) `n` images (bucket, url): sizes drawn by weight, then a pool
        slot, both seeded."""
        rng = random.Random(f"{self.seed}:{index}:{turn}")
        out = []
        for b in rng.choices(self.buckets, weights=self._weights, k=n):
            out.append((b, self._pool[(b.width, b.height)][rng.randrange(POOL)]))
        return out

    def parts(self, index: int, n: int, turn: int = 0) -> list[dict[str, Any]]:
        """Request `index`'s `n` images as OpenAI `image_url` content parts."""
        return [{"type": "image_url", "image_url": {"url": url}} for _, url in self.pick(index, n, turn)]


def attach_images(messages: list[dict[str, Any]], parts: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
    """The messages with image parts after the text of the last user message (its content becomes a list of
    parts), as a new list (a prompt source may keep its messages); None when the last user message has no text
    content to attach to (a message that already holds its images, e.g. history sent again, gets no more)."""
    i = next((i for i in range(len(messages) - 1, -1, -1) if messages[i].get("role") == "user"), None)
    if i is None or not isinstance(messages[i].get("content"), str):
        return None
    out = list(messages)
    out[i] = {**messages[i], "content": [{"type": "text", "text": messages[i]["content"]}, *parts]}
    return out


def count_image_parts(messages: Sequence[dict[str, Any]]) -> int:
    """How many image_url parts the messages hold (history included)."""
    return sum(
        1
        for m in messages
        if isinstance(m.get("content"), list)
        for p in m["content"]
        if isinstance(p, dict) and p.get("type") == "image_url"
    )


# A data URL is megabytes of base64 that json.dumps would scan on every request (~3 ms per MB, on the worker's
# hot path): the body holds a short placeholder instead, and encode_body splices the URL's bytes in (a copy).
# Base64 needs no JSON escaping, so the result is the same bytes json.dumps would give.
_DATA: dict[bytes, bytes] = {}
_MARK = re.compile(rb"@@vllm-locust-image-(\d+)@@")


def _placeholder(url: str) -> str:
    key = f"@@vllm-locust-image-{len(_DATA)}@@"
    _DATA[key.encode()] = url.encode("ascii")
    return key


def encode_body(body: dict[str, Any]) -> bytes:
    """A request body as compact JSON, image placeholders replaced by their data URLs."""
    raw = json.dumps(body, separators=(",", ":")).encode()
    if b"@@vllm-locust-image-" not in raw:
        return raw
    return _MARK.sub(lambda m: _DATA[m.group(0)], raw)


def data_url(url: str) -> str:
    """The data URL a part's URL stands for (a placeholder's), else the URL itself."""
    return _DATA.get(url.encode(), b"").decode("ascii") or url


def image_sizes(value: str) -> str:
    """Validate image size buckets `WxH[:WEIGHT],...` now, keep the text."""
    return T.checked_text(parse_buckets, value)


@dataclass(frozen=True)
class ImageOptions:
    """Images: vision-language load, chat only."""

    images: int = opt(
        0,
        T.nonneg_int,
        "Images per chat request, as image_url content parts (--scenario vision: at least 1)",
        *BOTH,
        metavar="N",
    )
    image_size: str = opt(
        "512x512",
        image_sizes,
        "Image sizes, each image's drawn by weight (vLLM's random-mm buckets), e.g. 512x512:3,1024x768:1",
        *BOTH,
        metavar="WxH[:W],...",
    )
    image_format: str = opt("png", T.text, "Encoding of the images sent as data URLs", *BOTH, choices=FORMATS)
    image_url_base: str = opt(
        "",
        T.url_base,
        "Send image URLs BASE/img_<w>x<h>_<k>.png for the server to fetch instead of data URLs",
        *BOTH,
        metavar="URL",
    )


_sets: dict[tuple[str, str, str, int], ImageSet] = {}  # per process: every user of a run shares one pool


def image_set(o: ImageOptions, seed: int) -> ImageSet:
    """The run's ImageSet, built (encoded) on first use and kept for the process; ValueError for bad options."""
    key = (o.image_size, o.image_format, o.image_url_base, seed)
    s = _sets.get(key)
    if s is None:
        s = _sets[key] = ImageSet(parse_buckets(o.image_size), o.image_format, seed, o.image_url_base)
    return s


def request_images(
    body: dict[str, Any],
    o: ImageOptions,
    seed: int,
    index: int,
    turn: int,
    at_least: int = 0,
    count: int | None = None,
) -> int:
    """Attach max(--images, `at_least`) images (or exactly `count`: a request that says its own, e.g. a trace
    line) to a chat body's last user message; the image parts the body then holds (history included)."""
    n = max(o.images, at_least) if count is None else count
    messages = body.get("messages")
    if not n or not isinstance(messages, list):
        return 0
    attached = attach_images(messages, image_set(o, seed).parts(index, n, turn))
    if attached is not None:
        body["messages"] = attached
    return count_image_parts(body["messages"])


def check_images(o: ImageOptions, endpoint: str, vision: bool) -> None:
    """Before any load: images only on chat, JPEG only with Pillow; ValueError with the one-line reason."""
    if not (o.images or vision):
        return
    if endpoint != "chat":
        raise ValueError(IMAGES_NEED_CHAT)
    if o.image_format == "jpeg" and not o.image_url_base:
        encode_jpeg(np.zeros((1, 1, 3), dtype=np.uint8))  # raises naming `pip install pillow` when missing
