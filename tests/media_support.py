"""Small images and a PDF for the tests of image and document parts: real headers, a few bytes each."""

from __future__ import annotations

PNG = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x06\x00\x00\x00\x1f\x15\xc4\x89"
"""The start of a 1x1 PNG."""
OTHER_PNG = PNG + b"\x00"
"""Another PNG (one byte more): the same image changed."""
JPEG = b"\xff\xd8\xff\xe0\x00\x10JFIF\x00"
"""The start of a JPEG."""
PDF = b"%PDF-1.4\n1 0 obj << /Type /Catalog >> endobj\n%%EOF\n"
"""A minimal PDF."""
