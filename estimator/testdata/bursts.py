# Random CPU bursts: exponential gaps (mean 2 s), 1 or 2 busy workers for 0.3-2 s.
import multiprocessing as mp, random, sys, time
def spin(d):
    end = time.time() + d
    while time.time() < end:
        pass
if __name__ == "__main__":
    random.seed(7)
    stop = time.time() + float(sys.argv[1])
    while time.time() < stop:
        time.sleep(random.expovariate(1 / 2.0))
        n, d = random.choice([1, 1, 2]), random.uniform(0.3, 2.0)
        ps = [mp.Process(target=spin, args=(d,)) for _ in range(n)]
        for p in ps: p.start()
        for p in ps: p.join()
