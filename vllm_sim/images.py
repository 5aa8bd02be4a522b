"""The simulator's image accounting: tokens per image by resolution, inside the chat prompt.

Rule (Qwen2-VL's, `smart_resize` of its image processor): the image is resized so both sides are multiples of
28 px (each side rounded to the nearest multiple, at least 28), then scaled into [MIN_PIXELS, MAX_PIXELS]
(56*56 and 28*28*1280) keeping its aspect; every 28x28 patch is one token: tokens = (h/28) * (w/28).
512x512 -> 504x504 -> 324 tokens; 1280x720 -> 1288x728 -> 1196; 1024x1024 -> 980x980 -> 1225 (capped); 64x64
-> 56x56 -> 4 (raised to the minimum).
The template's own vision start/end tokens are not modelled: an image adds exactly its patch tokens.

The size comes from the image itself when it is a data URL (the PNG IHDR or the JPEG SOF header: nothing is
decoded past it), else from a URL's name `..._<W>x<H>_...` (vllm-locust's --image-url-base names), else
DEFAULT_SIZE. Nothing is fetched. The image's tokens go into the prompt where its part is (so usage's
prompt_tokens and the prefill time include them, and a repeated image hits the prefix cache as vLLM's
content-hashed images do): ids derived from the image's bytes (crc32), distinct per image.
"""

from __future__ import annotations

import base64
import binascii
import math
import re
import struct
import zlib
from collections.abc import Sequence
from typing import Any

from . import tokenizer as tok

__all__ = ["DEFAULT_SIZE", "MAX_PIXELS", "MIN_PIXELS", "PATCH", "encode_chat", "image_size", "image_tokens"]

PATCH = 28  # Qwen2-VL: 14 px ViT patches merged 2x2
MIN_PIXELS = 56 * 56
MAX_PIXELS = 28 * 28 * 1280
DEFAULT_SIZE = (512, 512)  # an http(s) URL whose name says no size
_SIZE_IN_NAME = re.compile(r"(\d{1,5})x(\d{1,5})")
_HEAD_B64 = 65536  # base64 characters decoded to find a JPEG's SOF (48 KiB: past any tables it has)


def _round(n: float) -> int:
    return max(PATCH, round(n / PATCH) * PATCH)


def resized(width: int, height: int) -> tuple[int, int]:
    """Qwen2-VL's smart_resize: (width, height) as multiples of 28 within [MIN_PIXELS, MAX_PIXELS]."""
    h, w = _round(height), _round(width)
    if h * w > MAX_PIXELS:
        beta = math.sqrt(height * width / MAX_PIXELS)
        h = max(PATCH, math.floor(height / beta / PATCH) * PATCH)
        w = max(PATCH, math.floor(width / beta / PATCH) * PATCH)
    elif h * w < MIN_PIXELS:
        beta = math.sqrt(MIN_PIXELS / (height * width))
        h = math.ceil(height * beta / PATCH) * PATCH
        w = math.ceil(width * beta / PATCH) * PATCH
    return w, h


def image_tokens(width: int, height: int) -> int:
    """Prompt tokens of one image of this size (the rule above)."""
    w, h = resized(width, height)
    return (w // PATCH) * (h // PATCH)


def _png_size(data: bytes) -> tuple[int, int] | None:
    if data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR" and len(data) >= 24:
        w, h = struct.unpack(">II", data[16:24])
        return int(w), int(h)
    return None


def _jpeg_size(data: bytes) -> tuple[int, int] | None:
    if data[:2] != b"\xff\xd8":
        return None
    i = 2
    while i + 9 <= len(data):
        if data[i] != 0xFF:
            return None
        marker = data[i + 1]
        if marker in (0xD8, 0x01) or 0xD0 <= marker <= 0xD7:  # markers without a length
            i += 2
            continue
        (length,) = struct.unpack(">H", data[i + 2 : i + 4])
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):  # a start of frame: its size
            h, w = struct.unpack(">HH", data[i + 5 : i + 9])
            return int(w), int(h)
        i += 2 + length
    return None


def image_size(url: str) -> tuple[int, int]:
    """(width, height) of an image_url: from a data URL's PNG/JPEG header, a URL's name, else DEFAULT_SIZE;
    ValueError for a data URL that is not a PNG or JPEG image."""
    if url.startswith("data:"):
        head, _, payload = url.partition(",")
        if not head.endswith(";base64"):
            raise ValueError("image data URL must be base64")
        size = None
        for chunk in (payload[:_HEAD_B64], payload) if len(payload) > _HEAD_B64 else (payload,):
            try:  # the head first; the whole image only when its header lies further in (a big EXIF block)
                data = base64.b64decode(chunk[: len(chunk) // 4 * 4], validate=False)
            except (binascii.Error, ValueError):
                raise ValueError("image data URL is not valid base64") from None
            size = _png_size(data) or _jpeg_size(data)
            if size is not None:
                break
        if size is None or size[0] <= 0 or size[1] <= 0:
            raise ValueError("image data URL is not a PNG or JPEG image the simulator can read")
        return size
    found = _SIZE_IN_NAME.findall(url.rsplit("/", 1)[-1].split("?", 1)[0])
    if found and int(found[-1][0]) > 0 and int(found[-1][1]) > 0:  # the last WxH of the name
        return int(found[-1][0]), int(found[-1][1])
    return DEFAULT_SIZE


def _image_ids(url: str) -> list[int]:
    """The prompt token ids of one image: its tokens by size, ids from its bytes (same image, same ids)."""
    n = image_tokens(*image_size(url))
    base = zlib.crc32(url.encode("utf-8", "surrogatepass"))
    span = tok.VOCAB_SIZE - 100
    return [100 + (base + i) % span for i in range(n)]


def _part_urls(content: Any) -> list[str]:
    """The image URLs of a message content (OpenAI `image_url` parts: {"url": ...} or a plain string)."""
    if not isinstance(content, list):
        return []
    urls = []
    for part in content:
        if isinstance(part, dict) and part.get("type") == "image_url":
            iu = part.get("image_url")
            url = iu.get("url") if isinstance(iu, dict) else iu
            if not isinstance(url, str) or not url:
                raise ValueError("image_url part without a url")
            urls.append(url)
    return urls


def encode_chat(messages: Sequence[dict[str, Any]]) -> list[int]:
    """Token ids of a chat prompt, as tokenizer.encode_chat, with each message's image tokens after its text;
    ValueError naming a bad image part."""
    if not any(isinstance(m.get("content"), list) for m in messages):
        return tok.encode_chat(messages)  # the hot path of text chat: no images
    ids: list[int] = []
    for msg in messages:
        block = tok.encode_chat([msg])[: -len(tok.encode_chat([]))]  # start, role, text, end, newline
        images = [i for url in _part_urls(msg.get("content")) for i in _image_ids(url)]
        ids += block[:-2] + images + block[-2:]
    return ids + tok.encode_chat([])  # the generation prompt
