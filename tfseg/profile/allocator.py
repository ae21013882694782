"""A model of the statistics of TF's BFC allocator behind oneDNN's CPU allocator.

Best fit; a free chunk is split only when it is at least twice the request (or
128 MiB more), so a reused chunk can count up to twice its request; regions
double as they grow; allocations under 4 KiB go to oneDNN's small-size
allocator, whose peak adds to BFC's.
"""

import bisect

SMALL_ALLOCATION = 4096  # oneDNN's CPU allocator sends smaller requests to malloc


class BFCModel:
    """The statistics of TF's BFC allocator behind oneDNN's CPU allocator."""

    def __init__(self, small=SMALL_ALLOCATION):
        self.small = small
        self.chunks = {}  # start -> [size, in use, region]
        self.starts = []  # sorted chunk starts
        self.free = []  # sorted (size, start) of free chunks
        self.next_address = 0
        self.region = 2 << 20
        self.in_use = self.peak = 0
        self.small_in_use = self.small_peak = 0
        self.where = {}  # key -> (chunk start, or None when small; size)

    def allocate(self, key, nbytes):
        """Allocates `nbytes` for the buffer `key`."""
        if nbytes < self.small:
            self.where[key] = (None, nbytes)
            self.small_in_use += nbytes
            self.small_peak = max(self.small_peak, self.small_in_use)
            return
        rounded = max(256, -(-nbytes // 256) * 256)
        i = bisect.bisect_left(self.free, (rounded, -1))
        if i == len(self.free):
            self._extend(rounded)
            i = bisect.bisect_left(self.free, (rounded, -1))
        size, start = self.free.pop(i)
        chunk = self.chunks[start]
        if size >= 2 * rounded or size - rounded >= 128 << 20:
            chunk[0] = rounded
            self._add(start + rounded, size - rounded, chunk[2])
            size = rounded
        chunk[1] = True
        self.where[key] = (start, size)
        self.in_use += size
        self.peak = max(self.peak, self.in_use)

    def _add(self, start, size, region):
        self.chunks[start] = [size, False, region]
        bisect.insort(self.starts, start)
        bisect.insort(self.free, (size, start))

    def _extend(self, rounded):
        grew = False
        while rounded > self.region:
            self.region *= 2
            grew = True
        start = self.next_address
        self.next_address += self.region
        self._add(start, self.region, start)
        if not grew:
            self.region *= 2

    def release(self, key):
        """Frees the buffer `key`, merging its chunk with free neighbours of its region."""
        start, size = self.where.pop(key)
        if start is None:
            self.small_in_use -= size
            return
        self.in_use -= size
        chunk = self.chunks[start]
        chunk[1] = False
        after = start + chunk[0]
        if after in self.chunks and not self.chunks[after][1] and self.chunks[after][2] == chunk[2]:
            self.free.remove((self.chunks[after][0], after))
            chunk[0] += self.chunks.pop(after)[0]
            self.starts.remove(after)
        i = bisect.bisect_left(self.starts, start)
        if i > 0:
            before = self.starts[i - 1]
            previous = self.chunks[before]
            if not previous[1] and previous[2] == chunk[2] and before + previous[0] == start:
                self.free.remove((previous[0], before))
                previous[0] += chunk[0]
                del self.chunks[start]
                self.starts.pop(i)
                start, chunk = before, previous
        bisect.insort(self.free, (chunk[0], start))

    def reset_peak(self):
        """Starts the peaks over from what is in use now, as `reset_memory_stats` does."""
        self.peak, self.small_peak = self.in_use, self.small_in_use

    def current(self):
        """Bytes in use, as `get_memory_info(...)["current"]` reports them."""
        return self.in_use + self.small_in_use

    def peak_total(self):
        """The peak, as `get_memory_info(...)["peak"]` reports it."""
        # oneDNN's allocator reports the sum of its two allocators' peaks.
        return self.peak + self.small_peak
