"""Byte units, each defined once (no imports, so every package may use them).

Binary and decimal units differ by 7% at the giga scale, so the names say which:
``MIB`` and ``GIB`` are powers of two, ``KB``, ``MB`` and ``GB`` powers of ten. Each
setting keeps the unit its help names:

- ``--memory_budget_gb`` and ``--device_overhead_gb`` count ``GIB``, as the report does
  and as cards are sized (an "11 GB" card has 11,264 MiB);
- ``--cache_max_gb`` counts ``GB``, as the cache's estimate is printed
  (``tfseg.data.footprint.format_bytes``).

Example::

    from tfseg.units import GB, GIB
    int(16 * GIB)  # --memory_budget_gb=16: 17,179,869,184 bytes
    4.0 * GB       # --cache_max_gb=4: 4,000,000,000 bytes
"""

MIB = 2**20  # mebibyte
GIB = 2**30  # gibibyte

KB = 10**3  # kilobyte
MB = 10**6  # megabyte
GB = 10**9  # gigabyte
