"""One module per published result; each defines ``ENTRY`` (modules starting with ``_``
hold what several share)."""
