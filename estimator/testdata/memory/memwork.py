"""Memory workloads for recorded traces whose working set moves.

  python3 memwork.py batches SECONDS  an analytics job: batches that load
      40-400 MiB of records, aggregate them and drop them, one after another
      (sizes drawn from a fixed seed), with idle gaps between batches.
  python3 memwork.py cache SECONDS DIR  a caching reader: a 256 MiB data file
      written in DIR and read over and over (its pages become active page
      cache), beside an in-process cache whose size follows a slow wave
      between 32 and 288 MiB.
"""
import hashlib
import math
import os
import random
import sys
import time

MIB = 1 << 20


def batches(seconds):
    rng = random.Random(28)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        size = rng.choice([40, 80, 160, 240, 320, 400])
        records = [bytearray(os.urandom(64)) * 1024 for _ in range(size * MIB // 65536)]
        # Aggregate: touch every record a few times (the working set stays hot).
        for _ in range(3):
            total = 0
            for r in records:
                total += r[rng.randrange(len(r))]
                r[0] = total & 0xFF
        hold = rng.uniform(2, 8)
        t = time.monotonic() + hold
        while time.monotonic() < t and time.monotonic() < end:
            for r in records[:: max(1, len(records) // 64)]:
                r[1] ^= 1
            time.sleep(0.05)
        del records
        time.sleep(rng.uniform(1, 5))


def cache(seconds, directory):
    path = os.path.join(directory, "memwork-cache.dat")
    chunk = os.urandom(MIB)
    with open(path, "wb") as f:
        for _ in range(256):
            f.write(chunk)
    try:
        start = time.monotonic()
        store = []
        while time.monotonic() - start < seconds:
            phase = (time.monotonic() - start) / 60.0 * 2 * math.pi
            want = int(160 + 128 * math.sin(phase))  # MiB held in process
            while len(store) < want:
                store.append(bytearray(MIB))
                store[-1][::4096] = b"\x01" * (MIB // 4096)
            del store[want:]
            with open(path, "rb") as f:
                while True:
                    block = f.read(4 * MIB)
                    if not block:
                        break
                    hashlib.blake2b(block[:65536]).digest()
            time.sleep(0.2)
    finally:
        os.remove(path)


if __name__ == "__main__":
    if sys.argv[1] == "batches":
        batches(float(sys.argv[2]))
    elif sys.argv[1] == "cache":
        cache(float(sys.argv[2]), sys.argv[3])
    else:
        sys.exit("usage: memwork.py batches SECONDS | cache SECONDS DIR")
