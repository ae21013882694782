"""What `gpu_loop.py` samples while a run trains: NVML's GPU busy %, the CPU time of the
run's process tree and of the machine, every 0.1 s, read back over the counted steps.

    sampler = loop_sampler.Sampler(proc.pid); sampler.start(); ...; sampler.stop.set()
    sampler.window(t0, t1)   # {"gpu_busy_percent": ..., "cpu_process_percent": ..., ...}
"""

import os
import threading
import time


def tree_cpu_seconds(pid):
    """(user + system CPU seconds of `pid` and its descendants, source): psutil's, else
    /proc's for `pid` alone (its reaped children included); None once it has ended."""
    try:
        import psutil
    except ImportError:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()  # fields 14-17: utime .. cstime
            return sum(map(int, fields[11:15])) / os.sysconf("SC_CLK_TCK"), "proc"
        except (OSError, IndexError):
            return None, "proc"
    try:
        procs = [psutil.Process(pid)]
        procs += procs[0].children(recursive=True)
        return sum(sum(p.cpu_times()[:2]) for p in procs), "psutil"
    except psutil.Error:
        return None, "psutil"


def machine_jiffies():
    """(busy, total) CPU jiffies of the whole machine, from /proc/stat's first line."""
    with open("/proc/stat") as f:
        values = [int(v) for v in f.readline().split()[1:9]]
    return sum(values) - values[3] - values[4], sum(values)  # idle and iowait are not busy


class Sampler(threading.Thread):
    """Samples (time, GPU busy % or None, process tree CPU s, machine jiffies) every
    `every` seconds until `stop` is set."""

    def __init__(self, pid, every=0.1):
        super().__init__(daemon=True)
        self.pid, self.every, self.samples, self.stop = pid, every, [], threading.Event()
        self.nvml, self.cpu_source = None, None
        try:
            import pynvml
            pynvml.nvmlInit()
            self.nvml, self.handle = pynvml, pynvml.nvmlDeviceGetHandleByIndex(0)
        except Exception:  # no NVML, no driver: GPU busy is null
            pass

    def run(self):
        while not self.stop.wait(self.every):
            busy = (self.nvml.nvmlDeviceGetUtilizationRates(self.handle).gpu
                    if self.nvml else None)
            cpu, self.cpu_source = tree_cpu_seconds(self.pid)
            self.samples.append((time.time(), busy, cpu, *machine_jiffies()))

    def window(self, t0, t1):
        """GPU busy % (samples inside wall times t0..t1), the tree's CPU % (100 = one
        core) and the machine's (100 = every core), between the samples bracketing it."""
        gpu = [s[1] for s in self.samples if t0 <= s[0] <= t1 and s[1] is not None]
        cpu = [s for s in self.samples if s[2] is not None]
        out = {"gpu_busy_percent": sum(gpu) / len(gpu) if gpu else None,
               "gpu_samples": len(gpu), "cpu_process_percent": None,
               "cpu_machine_percent": None, "cpu_source": self.cpu_source}
        # The samples just before t0 and after t1: the dry run's short window spans two.
        a = ([s for s in cpu if s[0] <= t0] or cpu[:1] or [None])[-1]
        b = ([s for s in cpu if s[0] >= t1] or cpu[-1:] or [None])[0]
        if a is not None and b is not None and b[0] > a[0]:
            out["cpu_process_percent"] = 100 * (b[2] - a[2]) / (b[0] - a[0])
            out["cpu_machine_percent"] = 100 * (b[3] - a[3]) / max(b[4] - a[4], 1)
        return out
