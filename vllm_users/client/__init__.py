"""What goes on the wire: send one request, read its SSE stream as bytes arrive, stamp every chunk."""
